import Foundation

/// The seed's gcfg-style file format, parsed into sections and entries that remember their line.
///
/// The syntax follows gcfg (git-config's syntax):
/// - `[section]` and `[section "subsection"]` headers; section names and keys are
///   case-insensitive, subsection names are case-sensitive (a bundle ID) and may hold any
///   character, with `\"` and `\\` escapes;
/// - `key = value` lines; a key alone (no `=`) means `true`, for booleans;
/// - `;` and `#` start a comment, on a line of its own or after a value;
/// - a value is trimmed; within double quotes whitespace, `;` and `#` are kept, and the escapes
///   `\"`, `\\`, `\n`, `\t` and `\b` work inside and outside quotes;
/// - a key may be repeated where it is a list (`url` in `[amqp]`); an empty value
///   (`url =`) resets such a list, as in gcfg.
///
/// Unlike gcfg, a section header that appears twice is an error rather than a merge: two
/// `[apns "x"]` blocks are almost always a copy-paste mistake that would mix two credentials.
public struct ConfigDocument: Sendable, Hashable {
    /// The path as given by the caller; errors show it as is.
    public var path: String
    public var sections: [ConfigSection]

    public init(path: String, sections: [ConfigSection]) {
        self.path = path
        self.sections = sections
    }

    /// Reads and parses a file.
    public static func load(path: String) throws(ConfigurationError) -> ConfigDocument {
        let data: Data
        do {
            data = try BoundedFile.read(path, limit: BoundedFile.configurationLimit)
        } catch {
            throw ConfigurationError(.unreadableFile, at: .file(path: path, line: nil), "cannot read the file (it \(error))")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw ConfigurationError(.unreadableFile, at: .file(path: path, line: nil), "not UTF-8 text")
        }
        return try parse(text, path: path)
    }

    /// Parses the text of a file; `path` only names it in errors.
    public static func parse(_ text: String, path: String) throws(ConfigurationError) -> ConfigDocument {
        var sections: [ConfigSection] = []
        var firstHeaderLine: [SectionID: Int] = [:]
        // "\r\n" is one Character in Swift: split on it as well as on "\n" so CRLF files keep
        // their line numbers; a lone trailing "\r" is dropped below.
        let lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0 == "\n" || $0 == "\r\n" })
        for (index, rawLine) in lines.enumerated() {
            let lineNumber = index + 1
            var line = Substring(rawLine)
            if line.last == "\r" { line = line.dropLast() }
            var scanner = LineScanner(line, path: path, line: lineNumber)
            scanner.skipWhitespace()
            guard let first = scanner.peek(), first != ";", first != "#" else { continue }
            if first == "[" {
                let section = try scanner.sectionHeader()
                if let earlier = firstHeaderLine[section.id] {
                    throw ConfigurationError(
                        .duplicate, at: .file(path: path, line: lineNumber), section: section.displayName,
                        "appears again (first at line \(earlier)); put all its keys in one section")
                }
                firstHeaderLine[section.id] = lineNumber
                sections.append(section)
            } else {
                let entry = try scanner.entry()
                guard !sections.isEmpty else {
                    throw ConfigurationError(
                        .syntax, at: .file(path: path, line: lineNumber), key: entry.name,
                        "key outside of any section (start with a header such as [amqp])")
                }
                sections[sections.count - 1].entries.append(entry)
            }
        }
        return ConfigDocument(path: path, sections: sections)
    }
}

/// A section's identity: lower-cased name plus the subsection exactly as written.
public struct SectionID: Sendable, Hashable {
    public var name: String
    public var subsection: String?
    public init(name: String, subsection: String?) {
        self.name = name.lowercased()
        self.subsection = subsection
    }
}

/// One `[section]` or `[section "subsection"]` and the entries under it, in file order.
public struct ConfigSection: Sendable, Hashable {
    /// The name as written in the file (names compare case-insensitively).
    public var name: String
    public var subsection: String?
    /// The line of the header.
    public var line: Int
    public var entries: [ConfigEntry]

    public init(name: String, subsection: String?, line: Int, entries: [ConfigEntry] = []) {
        self.name = name
        self.subsection = subsection
        self.line = line
        self.entries = entries
    }

    public var id: SectionID { SectionID(name: name, subsection: subsection) }

    /// `[retry]`, `[apns "com.example.app"]`: how errors name the section.
    public var displayName: String { Self.displayName(name: name.lowercased(), subsection: subsection) }

    static func displayName(name: String, subsection: String?) -> String {
        guard let subsection else { return "[\(name)]" }
        let escaped = subsection.replacingOccurrences(of: "\\", with: "\\\\")
            .replacingOccurrences(of: "\"", with: "\\\"")
        return "[\(name) \"\(escaped)\"]"
    }

    /// The entries for a key, case-insensitively, in file order.
    public func entries(forKey key: String) -> [ConfigEntry] {
        let wanted = key.lowercased()
        return entries.filter { $0.name.lowercased() == wanted }
    }
}

/// One `key = value` line.
public struct ConfigEntry: Sendable, Hashable {
    /// The key as written (keys compare case-insensitively).
    public var name: String
    /// The value after unquoting and unescaping; nil for a bare key without `=`.
    public var value: String?
    public var line: Int

    public init(name: String, value: String?, line: Int) {
        self.name = name
        self.value = value
        self.line = line
    }
}

/// Reads one line: a section header or an entry, then an optional comment.
private struct LineScanner {
    private let characters: [Character]
    private var position = 0
    private let path: String
    private let line: Int

    init(_ text: Substring, path: String, line: Int) {
        self.characters = Array(text)
        self.path = path
        self.line = line
    }

    func peek() -> Character? { position < characters.count ? characters[position] : nil }

    mutating func skipWhitespace() {
        while let c = peek(), c == " " || c == "\t" { position += 1 }
    }

    private func error(_ message: String, key: String? = nil, section: String? = nil) -> ConfigurationError {
        ConfigurationError(.syntax, at: .file(path: path, line: line), section: section, key: key, message)
    }

    /// Letters, digits and `-`, starting with a letter (gcfg's rule for names).
    private mutating func name() -> String? {
        guard let first = peek(), first.isASCII, first.isLetter else { return nil }
        var out = ""
        while let c = peek(), c.isASCII, c.isLetter || c.isNumber || c == "-" {
            out.append(c)
            position += 1
        }
        return out
    }

    /// After the meaningful part: only whitespace or a comment may follow.
    private mutating func expectEndOfLine(_ what: String) throws(ConfigurationError) {
        skipWhitespace()
        if let c = peek(), c != ";", c != "#" {
            throw error("unexpected \"\(c)\" after \(what)")
        }
    }

    mutating func sectionHeader() throws(ConfigurationError) -> ConfigSection {
        let usage = "expected [name] or [name \"subsection\"]"
        position += 1  // "["
        skipWhitespace()
        guard let name = name() else { throw error("bad section header: \(usage)") }
        skipWhitespace()
        var subsection: String?
        if peek() == "\"" {
            position += 1
            var text = ""
            var closed = false
            while let c = peek() {
                position += 1
                if c == "\"" { closed = true; break }
                if c == "\\" {
                    guard let escaped = peek(), escaped == "\"" || escaped == "\\" else {
                        throw error("bad section header: only \\\" and \\\\ escapes are allowed in a subsection name")
                    }
                    text.append(escaped)
                    position += 1
                } else {
                    text.append(c)
                }
            }
            guard closed else { throw error("bad section header: unterminated subsection name") }
            subsection = text
            skipWhitespace()
        }
        guard peek() == "]" else {
            if peek() == "." {
                throw error("bad section header: use [\(name) \"sub.section\"], not the dotted form")
            }
            throw error("bad section header: \(usage)")
        }
        position += 1
        try expectEndOfLine("the section header")
        return ConfigSection(name: name, subsection: subsection, line: line)
    }

    mutating func entry() throws(ConfigurationError) -> ConfigEntry {
        guard let name = name() else {
            throw error("expected key = value, a [section] header, or a comment")
        }
        skipWhitespace()
        guard let next = peek(), next != ";", next != "#" else {
            return ConfigEntry(name: name, value: nil, line: line)
        }
        guard next == "=" else {
            throw error("expected \"=\" after the key", key: name)
        }
        position += 1
        skipWhitespace()
        return ConfigEntry(name: name, value: try value(key: name), line: line)
    }

    /// The value up to the end of the line or a comment outside quotes. Whitespace outside
    /// quotes is kept between words and dropped at the end.
    private mutating func value(key: String) throws(ConfigurationError) -> String {
        var out = ""
        var pendingWhitespace = ""
        var quoted = false
        while let c = peek() {
            position += 1
            if !quoted {
                if c == ";" || c == "#" { break }
                if c == " " || c == "\t" { pendingWhitespace.append(c); continue }
            }
            out += pendingWhitespace
            pendingWhitespace = ""
            switch c {
            case "\"":
                quoted.toggle()
            case "\\":
                guard let escaped = peek() else {
                    throw error("a value cannot end with \"\\\" (line continuation is not supported)", key: key)
                }
                position += 1
                switch escaped {
                case "\"": out.append("\"")
                case "\\": out.append("\\")
                case "n": out.append("\n")
                case "t": out.append("\t")
                case "b": out.append("\u{8}")
                default:
                    throw error("unknown escape \"\\\(escaped)\" (use \\\", \\\\, \\n, \\t or \\b)", key: key)
                }
            default:
                out.append(c)
            }
        }
        if quoted { throw error("unterminated quoted value (a \" is missing)", key: key) }
        return out
    }
}
