/// The placeholder tokens the project's own examples ship (deploy/kubernetes, config/, the
/// docs): an admin or metrics token that still holds one was never filled in, and a worker
/// running with it would open its admin to anyone who has read the examples. The loader refuses
/// them, so `check-config` and start-up fail with one line naming the file, line and key. (A
/// placeholder password in a broker or registry URL only fails to log in, and the shipped
/// production example keeps one to show where the password goes.)
enum PlaceholderSecrets {
    /// Words that mark a value as "to be replaced", compared without case.
    static let markers = ["replace-me", "replace_me", "replaceme", "changeme", "change-me", "change_me"]
    /// Whole example values the documentation shows for a token.
    static let exampleTokens: Set<String> = ["a-long-random-string-from-your-secret-store"]

    /// Why `value` is a placeholder, or nil when it is not one.
    static func problem(_ value: String) -> String? {
        let lower = value.lowercased()
        if let marker = markers.first(where: { lower.contains($0) }) {
            return "holds the placeholder \"\(marker)\" from an example: set a real secret"
        }
        if exampleTokens.contains(lower) {
            return "is the example value from the documentation: set a real secret"
        }
        return nil
    }
}
