import Crypto
import Foundation

/// Reads the files the configuration names with a size bound: the configuration file and the
/// credential files it names are read at start-up, on every reload and by the watcher's polls
/// (`ConfigurationWatch`), so a file swapped for something huge (a log, a device node) must
/// cost a bounded read and become an error, never an unbounded allocation.
public enum BoundedFile {
    /// The most a configuration file may hold: far beyond a thousand bundle sections.
    public static let configurationLimit = 1 << 20
    /// The most a credential file (key, certificate chain, CA bundle) may hold.
    public static let credentialLimit = 1 << 20

    public enum Problem: Error, Sendable, Hashable, CustomStringConvertible {
        case missing
        case directory
        case unreadable(String)
        case tooLarge(limit: Int)

        public var description: String {
            switch self {
            case .missing: "does not exist"
            case .directory: "is a directory, not a file"
            case .unreadable(let why): "cannot be read (\(why))"
            case .tooLarge(let limit): "is larger than \(limit / 1024) KiB"
            }
        }
    }

    /// The file's bytes, at most `limit` of them: a larger file is `tooLarge` after reading
    /// `limit + 1` bytes. Symbolic links are followed as they are now (a Kubernetes `..data`
    /// swap is seen by the next read).
    public static func read(_ path: String, limit: Int) throws(Problem) -> Data {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { throw .missing }
        guard !isDirectory.boolValue else { throw .directory }
        let handle: FileHandle
        do {
            handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: path))
        } catch {
            throw .unreadable("permission denied?")
        }
        defer { try? handle.close() }
        let data: Data
        do {
            data = try handle.read(upToCount: limit + 1) ?? Data()
        } catch {
            throw .unreadable("\(error.localizedDescription)")
        }
        guard data.count <= limit else { throw .tooLarge(limit: limit) }
        return data
    }

    /// SHA-256 of the file's content (hex), or a stand-in naming why it cannot be read: a file
    /// that appears, vanishes or grows past its bound is a change too.
    public static func digest(_ path: String, limit: Int) -> String {
        do {
            let data = try read(path, limit: limit)
            return SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
        } catch {
            return "unreadable: \(error)"
        }
    }
}
