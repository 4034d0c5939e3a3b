import APNSConfig
import Foundation
import Synchronization
import Testing

/// The configuration names regular files only (contract §3): a FIFO with no writer blocked the
/// open of every read of it for ever, so start-up, `check-config` and the reloader's polls hung.
/// Each case is one line naming the file, line and key, and nothing waits.
@Suite("file types")
struct FileTypeTests {
    /// `body` run on a thread of its own: when it is still blocked after a generous while, the
    /// FIFO is opened for writing and closed (the blocked open returns, the read finds nothing),
    /// and the test fails instead of hanging.
    static func withoutBlocking<T: Sendable>(
        on fifo: String, sourceLocation: SourceLocation = #_sourceLocation, _ body: @escaping @Sendable () -> T
    ) async throws -> T {
        let result = Mutex<T?>(nil)
        let thread = Thread { result.withLock { $0 = body() } }
        thread.start()
        let deadline = ContinuousClock.now + .seconds(30)
        while result.withLock({ $0 == nil }), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        if result.withLock({ $0 == nil }) {
            Issue.record("blocked reading the FIFO \(fifo)", sourceLocation: sourceLocation)
            while result.withLock({ $0 == nil }) {
                let writer = open(fifo, O_WRONLY | O_NONBLOCK)
                if writer >= 0 { close(writer) }
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        return try #require(result.withLock { $0 })
    }

    static func fifo(in directory: TempDirectory, _ name: String) throws -> String {
        let path = directory.path + "/" + name
        #expect(mkfifo(path, 0o600) == 0)
        return path
    }

    /// The start-up error of `text` (credential files checked), as its one line.
    static func startUpError(_ text: String, in directory: TempDirectory, fifo: String) async throws -> String {
        let path = try directory.write("test.conf", text)
        return try await withoutBlocking(on: fifo) {
            do {
                _ = try ConfigurationLoader.load(path: path, environment: [:], credentials: .verifyFiles)
                return "loaded"
            } catch {
                return "\(error)"
            }
        }
    }

    @Test func aFIFONamedAsACAFileIsOneLineNamingFileLineAndKey() async throws {
        let directory = try TempDirectory()
        try TestCredentials().writeSimulatorSet(to: directory, under: ".")
        let fifo = try Self.fifo(in: directory, "broker-ca.pem")
        let text = minimalConfig.replacingOccurrences(of: "[amqp]\n", with: "[amqp]\ncaFile = broker-ca.pem\n")
        let line = try await Self.startUpError(text, in: directory, fifo: fifo)
        #expect(line == "\(directory.path)/test.conf:2: [amqp] caFile: \(fifo) is a FIFO (named pipe), not a regular file")
    }

    @Test func aFIFONamedAsATokenKeyIsOneLineNamingFileLineAndKey() async throws {
        let directory = try TempDirectory()
        let fifo = try Self.fifo(in: directory, "AuthKey_KEY1234567.p8")
        let line = try await Self.startUpError(minimalConfig, in: directory, fifo: fifo)
        #expect(line == "\(directory.path)/test.conf:7: [apns \"com.example.app\"] tokenKeyFile: \(fifo) is a FIFO (named pipe), not a regular file")
    }

    @Test func aFIFOAsTheConfigurationFileIsRefused() async throws {
        let directory = try TempDirectory()
        let fifo = try Self.fifo(in: directory, "apns-worker.conf")
        let line = try await Self.withoutBlocking(on: fifo) {
            do {
                _ = try ConfigurationLoader.load(path: fifo, environment: [:], credentials: .skipFiles)
                return "loaded"
            } catch {
                return "\(error)"
            }
        }
        #expect(line.hasPrefix("\(fifo): "), "\(line)")
        #expect(line.contains("is a FIFO (named pipe), not a regular file"), "\(line)")
    }

    /// The reloader's poll digests every watched file: a FIFO is a stand-in naming why, at once.
    @Test func aFIFOsDigestSaysWhyWithoutWaiting() async throws {
        let directory = try TempDirectory()
        let fifo = try Self.fifo(in: directory, "key.p8")
        let digest = try await Self.withoutBlocking(on: fifo) { BoundedFile.digest(fifo, limit: BoundedFile.credentialLimit) }
        #expect(digest == "unreadable: is a FIFO (named pipe), not a regular file")
        #expect(throws: BoundedFile.Problem.notRegular(kind: "a device")) { try BoundedFile.read("/dev/null", limit: 10) }
        #expect(throws: BoundedFile.Problem.directory) { try BoundedFile.read(directory.path, limit: 10) }
        #expect(throws: BoundedFile.Problem.missing) { try BoundedFile.read(directory.path + "/none", limit: 10) }
    }
}
