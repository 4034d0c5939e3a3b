/// `APNS_WORKER_LOG_LEVEL`, checked once when any `apns-worker` command starts: a value that
/// names no log level is one configuration error naming the variable (exit 1), as for a bad key,
/// instead of the quiet fall-back to the default it was. Apart from swift-log so the
/// rule is tested without a logger; the names are swift-log's `Logger.Level` raw values.
public enum LogLevelEnvironment {
    public static let variable = "APNS_WORKER_LOG_LEVEL"
    /// swift-log's levels, least severe first.
    public static let levels = ["trace", "debug", "info", "notice", "warning", "error", "critical"]

    /// The level `environment` names (any case), or nil when the variable is unset or empty (the
    /// command's default applies).
    public static func level(_ environment: [String: String]) throws(ConfigurationError) -> String? {
        guard let value = environment[variable], !value.isEmpty else { return nil }
        let name = value.lowercased()
        guard levels.contains(name) else {
            throw ConfigurationError(
                .badValue, at: .environment(variable: variable),
                "\(ValueSyntax.quoted(value)) is not a log level; use \(levels.joined(separator: ", ")), or unset \(variable)")
        }
        return name
    }
}
