import Crypto
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// read(2), named apart from `BoundedFile.read`.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int {
    #if canImport(Glibc)
    Glibc.read(fd, buffer, count)
    #else
    Darwin.read(fd, buffer, count)
    #endif
}

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
        /// A FIFO, socket or device: opening a FIFO with no writer blocks, and reading a device
        /// may never end, so the configuration names regular files only.
        case notRegular(kind: String)
        case unreadable(String)
        case tooLarge(limit: Int)

        public var description: String {
            switch self {
            case .missing: "does not exist"
            case .directory: "is a directory, not a file"
            case .notRegular(let kind): "is \(kind), not a regular file"
            case .unreadable(let why): "cannot be read (\(why))"
            case .tooLarge(let limit): "is larger than \(limit / 1024) KiB"
            }
        }
    }

    /// The file's bytes, at most `limit` of them: a larger file is `tooLarge` after reading
    /// `limit + 1` bytes. Symbolic links are followed as they are now (a Kubernetes `..data`
    /// swap is seen by the next read). Regular files only: the type is looked at before the
    /// file is opened, and again on what was opened (without blocking: a FIFO swapped in
    /// between opens at once and is refused).
    public static func read(_ path: String, limit: Int) throws(Problem) -> Data {
        var info = stat()
        guard stat(path, &info) == 0 else { throw errno == ENOENT || errno == ENOTDIR ? .missing : .unreadable(Self.reason(errno)) }
        try checkType(info.st_mode)
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw errno == ENOENT ? .missing : .unreadable(Self.reason(errno)) }
        defer { close(fd) }
        guard fstat(fd, &info) == 0 else { throw .unreadable(Self.reason(errno)) }
        try checkType(info.st_mode)
        var data = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while data.count <= limit {
            let count = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, min($0.count, limit + 1 - data.count)) }
            if count < 0, errno == EINTR { continue }
            guard count >= 0 else { throw .unreadable(Self.reason(errno)) }
            guard count > 0 else { break }
            data.append(contentsOf: chunk[..<count])
        }
        guard data.count <= limit else { throw .tooLarge(limit: limit) }
        return data
    }

    private static func checkType(_ mode: mode_t) throws(Problem) {
        switch mode & S_IFMT {
        case S_IFREG: return
        case S_IFDIR: throw .directory
        case S_IFIFO: throw .notRegular(kind: "a FIFO (named pipe)")
        case S_IFSOCK: throw .notRegular(kind: "a socket")
        case S_IFCHR, S_IFBLK: throw .notRegular(kind: "a device")
        default: throw .notRegular(kind: "an unknown kind of file")
        }
    }

    private static func reason(_ code: Int32) -> String {
        code == EACCES ? "permission denied" : String(cString: strerror(code))
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
