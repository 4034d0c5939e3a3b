/// APNSConfig: the gcfg-style configuration file of contract §3, environment overrides, and the
/// typed configuration the worker runs on. Every error names the file, line and key.

/// Where a configuration value came from: a line of a file, or an environment variable.
public enum ConfigLocation: Sendable, Hashable, CustomStringConvertible {
    /// A line of a configuration file; `line` is nil when the problem concerns the whole file
    /// (for example a required section that is missing).
    case file(path: String, line: Int?)
    /// An `APNS_WORKER_<SECTION>_<KEY>` override.
    case environment(variable: String)

    public var description: String {
        switch self {
        case .file(let path, let line?): "\(path):\(line)"
        case .file(let path, nil): path
        case .environment(let variable): "environment \(variable)"
        }
    }
}

/// Everything the configuration cannot use, as one line an operator can act on:
/// `config/x.conf:12: [retry] delays: "10x" is not a duration (use e.g. 10s, 1m, 500ms)`.
public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of problem, for code that reacts differently to, say, a missing file.
    public struct Kind: Sendable, Hashable, CustomStringConvertible {
        private enum Code: String, Sendable, Hashable {
            case unreadableFile, syntax, unknownSection, unknownKey, duplicate, badValue
            case missingKey, conflict, noBundles, credential
        }
        private let code: Code
        private init(_ code: Code) { self.code = code }

        /// The configuration file itself cannot be read.
        public static let unreadableFile = Kind(.unreadableFile)
        /// A line that is not a section header, a `key = value` line, a comment or blank.
        public static let syntax = Kind(.syntax)
        public static let unknownSection = Kind(.unknownSection)
        public static let unknownKey = Kind(.unknownKey)
        /// A single-valued key or a section given twice.
        public static let duplicate = Kind(.duplicate)
        /// A value of the wrong form or out of range.
        public static let badValue = Kind(.badValue)
        /// A required key is absent (the location is the section header).
        public static let missingKey = Kind(.missingKey)
        /// Keys that contradict each other (both auths, environment vs. domain, ...).
        public static let conflict = Kind(.conflict)
        /// The file configures no `[apns "bundle.id"]` section.
        public static let noBundles = Kind(.noBundles)
        /// A credential file that is missing, unreadable, of the wrong format, or mismatched.
        public static let credential = Kind(.credential)

        public var description: String { code.rawValue }
    }

    public var kind: Kind
    public var location: ConfigLocation
    /// The section as written in a file header: `[retry]`, `[apns "com.example.app"]`.
    public var section: String?
    /// The key as the documentation spells it (`maxAttempts`), whatever case the file used.
    public var key: String?
    /// What is wrong and, where it helps, what would be right.
    public var message: String

    public init(_ kind: Kind, at location: ConfigLocation, section: String? = nil, key: String? = nil, _ message: String) {
        self.kind = kind
        self.location = location
        self.section = section
        self.key = key
        self.message = message
    }

    public var description: String {
        var line = "\(location): "
        if let section { line += key == nil ? "\(section): " : "\(section) " }
        if let key { line += "\(key): " }
        // Messages quote values that may hold newlines (a quoted "\n"): keep the error one line.
        line += message.replacingNewlines()
        return line
    }
}

extension String {
    fileprivate func replacingNewlines() -> String {
        var out = ""
        for character in self {
            switch character {
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            default: out.append(character)
            }
        }
        return out
    }
}
