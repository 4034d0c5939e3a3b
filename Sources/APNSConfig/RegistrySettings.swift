import Foundation

/// `[registry]` (contract §6): the device registry on PostgreSQL. Absent section and no
/// `APNS_WORKER_REGISTRY_URL`: no registry, and the worker behaves as in sections 1 to 5.
public struct RegistrySettings: Sendable, Hashable {
    /// `url`: `postgres://user:password@host:port/database?sslmode=…`, as libpq reads it. Required.
    public var url: PostgresURL
    /// `poolSize`: most connections to PostgreSQL per instance (1 to 100). Default 8.
    public var poolSize: Int
    /// `countsFlushInterval`: how often this instance adds its counts to PostgreSQL (100ms to 1h).
    /// Default 5s; at most this much of one instance's counts is lost to a `kill -9`.
    public var countsFlushInterval: Duration
    /// `syncWindow`: background group-job pushes reach a device at most once per window,
    /// fleet-wide (0 to 1h; 0 = off). Default 30s.
    public var syncWindow: Duration = defaultSyncWindow
    /// Where `url` was set (file and line, or environment variable), for start-up errors.
    public var urlLocation: ConfigLocation = .environment(variable: "APNS_WORKER_REGISTRY_URL")

    public static let defaultPoolSize = 8
    public static let defaultCountsFlushInterval: Duration = .seconds(5)
    public static let defaultSyncWindow: Duration = .seconds(30)

    public init(url: PostgresURL, poolSize: Int = defaultPoolSize, countsFlushInterval: Duration = defaultCountsFlushInterval) {
        self.url = url
        self.poolSize = poolSize
        self.countsFlushInterval = countsFlushInterval
    }
}

/// A PostgreSQL URL taken apart, the way libpq reads `postgres://` and `postgresql://` URLs
/// (percent-escapes decoded; `sslmode` one of disable, allow, prefer, require, verify-ca,
/// verify-full; default prefer). Its description masks the password.
public struct PostgresURL: Sendable, Hashable, CustomStringConvertible {
    public enum SSLMode: String, Sendable, Hashable, CaseIterable {
        case disable, allow, prefer, require, verifyCA = "verify-ca", verifyFull = "verify-full"
    }

    public var host: String
    public var port: Int
    public var user: String
    public var password: String?
    public var database: String
    public var sslMode: SSLMode
    /// `sslrootcert`: a PEM file of the CAs to verify the server's certificate with, or
    /// `system` for the system's roots (libpq 16; only with `verify-full`). Given, the chain is
    /// verified in every mode that uses TLS, as libpq does when a root certificate is present.
    public var sslRootCert: String?
    /// The URL as given, password replaced by `***`.
    public let masked: String

    public var description: String { masked }

    /// Parses `text`; the error message never contains the password.
    public init(parsing text: String) throws(PostgresURLError) {
        let masked = AMQPSettings.maskingPassword(text)
        self.masked = masked
        let lower = text.lowercased()
        guard lower.hasPrefix("postgres://") || lower.hasPrefix("postgresql://") else {
            throw PostgresURLError("\(ValueSyntax.quoted(masked)) is not a PostgreSQL URL (postgres://user:password@host:5432/database)")
        }
        guard !text.contains(where: \.isWhitespace), let components = URLComponents(string: text) else {
            throw PostgresURLError("\(ValueSyntax.quoted(masked)) is not a valid URL")
        }
        guard let host = components.host, !host.isEmpty else {
            throw PostgresURLError("\(ValueSyntax.quoted(masked)) has no host")
        }
        guard let user = components.user, !user.isEmpty else {
            throw PostgresURLError("\(ValueSyntax.quoted(masked)) has no user name (postgres://user:password@host/database)")
        }
        let database = String(components.path.drop(while: { $0 == "/" }))
        guard !database.isEmpty, !database.contains("/") else {
            throw PostgresURLError("\(ValueSyntax.quoted(masked)) names no database (…@host:5432/database)")
        }
        let port = components.port ?? 5432
        guard (1...65535).contains(port) else { throw PostgresURLError("\(ValueSyntax.quoted(masked)) has a port out of range") }
        var sslMode = SSLMode.prefer
        var sslRootCert: String?
        for item in components.queryItems ?? [] {
            switch item.name {
            case "sslrootcert":
                guard let path = item.value, !path.isEmpty else {
                    throw PostgresURLError("\(ValueSyntax.quoted(masked)): sslrootcert names no file")
                }
                sslRootCert = path
            case "sslmode":
                guard let mode = item.value.flatMap(SSLMode.init(rawValue:)) else {
                    let allowed = SSLMode.allCases.map(\.rawValue).joined(separator: ", ")
                    throw PostgresURLError("\(ValueSyntax.quoted(masked)): sslmode must be one of \(allowed)")
                }
                sslMode = mode
            case "application_name", "connect_timeout":
                continue
            default:
                throw PostgresURLError(
                    "\(ValueSyntax.quoted(masked)): unsupported parameter \(item.name) (sslmode, sslrootcert, application_name, connect_timeout)")
            }
        }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        self.port = port
        self.user = components.user?.removingPercentEncoding ?? user
        self.password = components.password?.removingPercentEncoding
        self.database = database.removingPercentEncoding ?? database
        self.sslMode = sslMode
        if sslRootCert == "system", sslMode != .verifyFull {
            // libpq 16's rule: the system's roots trust any public name, so only a host name
            // check makes them mean anything.
            throw PostgresURLError("\(ValueSyntax.quoted(masked)): sslrootcert=system needs sslmode=verify-full")
        }
        self.sslRootCert = sslRootCert
    }

    /// The CA file to verify with (nil: none given, or the system's roots).
    public var rootCertificateFile: String? {
        sslRootCert == "system" ? nil : sslRootCert
    }

    /// Whether the server's certificate chain is verified: `verify-ca`, `verify-full`, or any
    /// TLS mode with `sslrootcert`.
    public var verifiesCertificate: Bool {
        switch sslMode {
        case .disable: false
        case .verifyCA, .verifyFull: true
        case .allow, .prefer, .require: sslRootCert != nil
        }
    }
}

/// Why a `[registry] url` is unusable; the message never holds the password.
public struct PostgresURLError: Error, Sendable, Hashable, CustomStringConvertible {
    public var message: String
    init(_ message: String) { self.message = message }
    public var description: String { message }
}

extension ConfigurationLoader {
    /// The `[registry]` keys (contract §6).
    static let registryKeys = ["url", "poolSize", "countsFlushInterval", "syncWindow"]

    /// `[registry]`, or nil when neither the file nor the environment asks for a registry.
    static func readRegistry(_ settings: LayeredSettings, document: ConfigDocument) throws(ConfigurationError) -> RegistrySettings? {
        let header = document.sections.first { $0.name.lowercased() == "registry" && $0.subsection == nil }
        guard let urlSetting = settings.string("registry", "url") else {
            guard let header else { return nil }
            throw ConfigurationError(
                .missingKey, at: .file(path: document.path, line: header.line), section: "[registry]", key: "url",
                "missing: url = postgres://user:password@host:5432/database is required (or set APNS_WORKER_REGISTRY_URL)")
        }
        let url = try settings.parse(urlSetting, "registry", "url") { v throws(ValueProblem) in
            do throws(PostgresURLError) { return try PostgresURL(parsing: v) } catch { throw ValueProblem(error.message) }
        }
        var registry = RegistrySettings(url: url)
        registry.urlLocation = urlSetting.location
        if let setting = settings.string("registry", "poolSize") {
            registry.poolSize = try settings.parse(setting, "registry", "poolSize") { v throws(ValueProblem) in
                try ValueSyntax.int(v, in: 1...100)
            }
        }
        if let setting = settings.string("registry", "countsFlushInterval") {
            registry.countsFlushInterval = try settings.parse(setting, "registry", "countsFlushInterval") { v throws(ValueProblem) in
                let value = try ValueSyntax.duration(v)
                guard value >= .milliseconds(100), value <= .seconds(3600) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (100ms to 1h)")
                }
                return value
            }
        }
        if let setting = settings.string("registry", "syncWindow") {
            registry.syncWindow = try settings.parse(setting, "registry", "syncWindow") { v throws(ValueProblem) in
                let value = try ValueSyntax.duration(v)
                guard value >= .zero, value <= .seconds(3600) else {
                    throw ValueProblem("\(ValueSyntax.quoted(v)) is out of range (0 = off, up to 1h)")
                }
                return value
            }
        }
        return registry
    }
}
