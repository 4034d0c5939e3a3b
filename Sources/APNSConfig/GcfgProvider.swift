import Configuration
import Synchronization

/// The global sections of a parsed gcfg file (`[amqp]`, `[retry]`, `[admin]`, `[worker]`) as a
/// swift-configuration provider, so they layer under `EnvironmentVariablesProvider` overrides
/// in one `ConfigReader`.
///
/// Keys are `[section, key]`, matched case-insensitively as gcfg does. The provider serves raw
/// strings: `.string` is the key's value, `.stringArray` every value of a repeated key (an
/// empty value resets the list, as in gcfg). Typed parsing stays with `ConfigurationLoader`,
/// which has the file and line at hand for its error messages.
///
/// Bundle sections are not served here: `ConfigReader` cannot enumerate keys, so it cannot
/// discover which `[apns "bundle.id"]` subsections exist, and the contract gives bundle keys
/// no environment overrides. The loader reads them straight from the `ConfigDocument`.
public struct GcfgProvider: ConfigProvider {
    public static let namePrefix = "GcfgProvider"
    private let current: GcfgSnapshot

    /// `secretKeys`: `section.key` names (lower case) whose values are secrets, so access logs
    /// redact them.
    public init(document: ConfigDocument, secretKeys: Set<String> = []) {
        self.current = GcfgSnapshot(document: document, secretKeys: secretKeys)
    }

    public var providerName: String { current.providerName }

    public func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        try current.value(forKey: key, type: type)
    }

    // The file is read once; fetching and watching serve the same immutable values.
    nonisolated(nonsending) public func fetchValue(forKey key: AbsoluteConfigKey, type: ConfigType) async throws -> LookupResult {
        try value(forKey: key, type: type)
    }

    nonisolated(nonsending) public func watchValue<Return: ~Copyable>(
        forKey key: AbsoluteConfigKey,
        type: ConfigType,
        updatesHandler: nonisolated(nonsending) (
            _ updates: ConfigUpdatesAsyncSequence<Result<LookupResult, any Error>, Never>
        ) async throws -> Return
    ) async throws -> Return {
        try await watchValueFromValue(forKey: key, type: type, updatesHandler: updatesHandler)
    }

    public func snapshot() -> any ConfigSnapshot { current }

    nonisolated(nonsending) public func watchSnapshot<Return: ~Copyable>(
        updatesHandler: nonisolated(nonsending) (_ updates: ConfigUpdatesAsyncSequence<any ConfigSnapshot, Never>) async throws -> Return
    ) async throws -> Return {
        try await watchSnapshotFromSnapshot(updatesHandler: updatesHandler)
    }

    /// The entries a lookup of `[section, key]` reads, in file order, after the last reset.
    public func entries(section: String, key: String) -> [ConfigEntry] {
        current.entries(section: section, key: key)
    }
}

/// Raised when a caller asks the provider for a type other than strings.
public struct GcfgProviderTypeError: Error, Sendable, CustomStringConvertible {
    public var key: String
    public var type: ConfigType
    public var description: String { "\(key): the gcfg provider serves strings, not \(type.rawValue)" }
}

struct GcfgSnapshot: ConfigSnapshot {
    let providerName: String
    /// `section.key` (lower case) → entries in file order.
    private let entriesByKey: [String: [ConfigEntry]]
    private let secretKeys: Set<String>

    init(document: ConfigDocument, secretKeys: Set<String>) {
        self.providerName = "\(GcfgProvider.namePrefix)[\(document.path)]"
        var byKey: [String: [ConfigEntry]] = [:]
        for section in document.sections where section.subsection == nil {
            for entry in section.entries {
                byKey["\(section.name.lowercased()).\(entry.name.lowercased())", default: []].append(entry)
            }
        }
        self.entriesByKey = byKey
        self.secretKeys = secretKeys
    }

    func entries(section: String, key: String) -> [ConfigEntry] {
        let all = entriesByKey["\(section.lowercased()).\(key.lowercased())"] ?? []
        // gcfg: an empty value resets a multi-valued key.
        guard let reset = all.lastIndex(where: { $0.value == "" }) else { return all }
        return Array(all[(reset + 1)...])
    }

    func value(forKey key: AbsoluteConfigKey, type: ConfigType) throws -> LookupResult {
        let encodedKey = key.components.map { $0.lowercased() }.joined(separator: ".")
        guard key.components.count == 2 else { return LookupResult(encodedKey: encodedKey, value: nil) }
        let isSecret = secretKeys.contains(encodedKey)
        switch type {
        case .string:
            let all = entriesByKey[encodedKey] ?? []
            guard let last = all.last else { return LookupResult(encodedKey: encodedKey, value: nil) }
            // A bare key (no "=") is gcfg's `true`.
            return LookupResult(encodedKey: encodedKey, value: ConfigValue(.string(last.value ?? "true"), isSecret: isSecret))
        case .stringArray:
            let live = entries(section: key.components[0], key: key.components[1])
            guard !live.isEmpty else { return LookupResult(encodedKey: encodedKey, value: nil) }
            return LookupResult(
                encodedKey: encodedKey, value: ConfigValue(.stringArray(live.map { $0.value ?? "true" }), isSecret: isSecret))
        default:
            throw GcfgProviderTypeError(key: encodedKey, type: type)
        }
    }
}

/// Remembers, for each key read through a `ConfigReader`, which provider answered and under
/// which encoded key (for the environment provider: the variable's name), so a bad value can
/// be reported at its origin.
final class OriginRecorder: AccessReporter {
    struct Origin: Sendable {
        var providerName: String
        var encodedKey: String
    }

    private let origins = Mutex<[String: Origin]>([:])

    func report(_ event: AccessEvent) {
        let winner = event.providerResults.first { result in
            if case .success(let lookup) = result.result, lookup.value != nil { return true }
            return false
        }
        guard let winner, case .success(let lookup) = winner.result else { return }
        let key = event.metadata.key.components.map { $0.lowercased() }.joined(separator: ".")
        origins.withLock { $0[key] = Origin(providerName: winner.providerName, encodedKey: lookup.encodedKey) }
    }

    func origin(section: String, key: String) -> Origin? {
        origins.withLock { $0["\(section.lowercased()).\(key.lowercased())"] }
    }
}
