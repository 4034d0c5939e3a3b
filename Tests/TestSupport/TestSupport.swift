/// TestSupport: what the test targets share: the coordinates of the throwaway broker that
/// `scripts/test` starts, private brokers for tests that stop or restart one, free ports,
/// child processes and the RabbitMQ management API.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where a RabbitMQ node listens, and how to control it.
public struct BrokerCoordinates: Sendable {
    public var amqpURL: String
    public var amqpPort: Int
    public var managementURL: String
    public var nodeName: String
    public var rabbitmqctl: String

    public init(amqpURL: String, amqpPort: Int, managementURL: String, nodeName: String, rabbitmqctl: String) {
        self.amqpURL = amqpURL
        self.amqpPort = amqpPort
        self.managementURL = managementURL
        self.nodeName = nodeName
        self.rabbitmqctl = rabbitmqctl
    }

    /// `rabbitmqctl -n <node> args…`; throws when it exits non-zero.
    @discardableResult
    public func ctl(_ arguments: String...) async throws -> String {
        let result = try await runProcess(rabbitmqctl, ["-n", nodeName] + arguments)
        guard result.status == 0 else {
            throw TestSupportError("rabbitmqctl \(arguments.joined(separator: " ")) failed (\(result.status)): \(result.stderr)")
        }
        return result.stdout
    }

    /// GET on the management API as guest; returns the body.
    public func management(_ path: String) async throws -> Data {
        let result = try await runProcess("/usr/bin/curl", ["-fsS", "-u", "guest:guest", managementURL + "/api" + path])
        guard result.status == 0 else { throw TestSupportError("GET \(path) failed: \(result.stderr)") }
        return Data(result.stdout.utf8)
    }

    /// The management API's JSON for `path`, decoded as a dictionary or an array.
    public func managementJSON(_ path: String) async throws -> Any {
        try JSONSerialization.jsonObject(with: await management(path))
    }
}

public struct TestSupportError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

public enum TestBroker {
    /// The node `scripts/test` started, from its `APNS_TEST_*` exports; nil when tests run
    /// without it (then broker tests are skipped by their `.enabled(if:)` trait).
    public static let shared: BrokerCoordinates? = {
        let env = ProcessInfo.processInfo.environment
        guard let url = env["APNS_TEST_AMQP_URL"], let port = env["APNS_TEST_AMQP_PORT"].flatMap(Int.init),
            let mgmt = env["APNS_TEST_RABBITMQ_MGMT_URL"], let node = env["APNS_TEST_RABBITMQ_NODE"]
        else { return nil }
        return BrokerCoordinates(
            amqpURL: url, amqpPort: port, managementURL: mgmt, nodeName: node,
            rabbitmqctl: env["APNS_TEST_RABBITMQCTL"] ?? "/usr/lib/rabbitmq/bin/rabbitmqctl")
    }()

    public static var isAvailable: Bool { shared != nil }

    /// The shared broker's amqps listener (scripts/broker.sh with APNS_BROKER_TLS_PORT): its
    /// port and the CA that signed its certificate, made for the host name `localhost`.
    public static let tls: (port: Int, caFile: String)? = {
        let env = ProcessInfo.processInfo.environment
        guard let port = env["APNS_TEST_AMQPS_PORT"].flatMap(Int.init), let caFile = env["APNS_TEST_AMQPS_CA"] else { return nil }
        return (port, caFile)
    }()

    /// The shared broker, or a thrown error naming the command that provides one.
    public static func require() throws -> BrokerCoordinates {
        guard let shared else { throw TestSupportError("no test broker: run the tests with scripts/test") }
        return shared
    }
}

/// A RabbitMQ node of a test's own, for tests that stop, restart or kill the broker and so must
/// not disturb the shared one. Use it through `withPrivateBroker`, which always stops it.
public final class PrivateBroker: Sendable {
    public let coordinates: BrokerCoordinates
    public let directory: String

    private init(coordinates: BrokerCoordinates, directory: String) {
        self.coordinates = coordinates
        self.directory = directory
    }

    /// `frameMax`: the frame size the node offers (bytes); nil: RabbitMQ's 131,072.
    public static func start(frameMax: Int? = nil) async throws -> PrivateBroker {
        // A port free when picked may be taken before the node binds it, seconds later (another
        // test's connection gets it as its ephemeral port): the node then fails to start, and a
        // fresh set of ports is tried. CI saw the management listener lose that race once.
        var failure: (any Error)?
        for _ in 0..<3 {
            do {
                return try await startOnce(frameMax: frameMax)
            } catch {
                failure = error
            }
        }
        throw failure ?? TestSupportError("private broker did not start")
    }

    private static func startOnce(frameMax: Int?) async throws -> PrivateBroker {
        let dir = NSTemporaryDirectory() + "apnsw-broker-\(UUID().uuidString.prefix(8))"
        let amqp = try serverPort(), mgmt = try serverPort(), dist = try serverPort()
        var env = ProcessInfo.processInfo.environment
        env["APNS_BROKER_PORT"] = String(amqp)
        env["APNS_BROKER_MGMT_PORT"] = String(mgmt)
        env["APNS_BROKER_DIST_PORT"] = String(dist)
        env["APNS_BROKER_TLS_PORT"] = nil
        env["APNS_BROKER_FRAME_MAX"] = frameMax.map(String.init)
        let result = try await runProcess(repositoryRoot + "/scripts/broker.sh", ["start", dir], environment: env)
        guard result.status == 0 else {
            var stopEnv = ProcessInfo.processInfo.environment
            stopEnv["APNS_BROKER_PORT"] = String(amqp)
            _ = try? await runProcess(repositoryRoot + "/scripts/broker.sh", ["stop", dir], environment: stopEnv)
            try? FileManager.default.removeItem(atPath: dir)
            throw TestSupportError("private broker did not start: \(result.stderr)")
        }
        let coordinates = BrokerCoordinates(
            amqpURL: "amqp://guest:guest@127.0.0.1:\(amqp)/%2f", amqpPort: amqp,
            managementURL: "http://127.0.0.1:\(mgmt)", nodeName: "apnsw-\(amqp)@localhost",
            rabbitmqctl: "/usr/lib/rabbitmq/bin/rabbitmqctl")
        return PrivateBroker(coordinates: coordinates, directory: dir)
    }

    public func stop() async {
        var env = ProcessInfo.processInfo.environment
        env["APNS_BROKER_PORT"] = String(coordinates.amqpPort)
        _ = try? await runProcess(repositoryRoot + "/scripts/broker.sh", ["stop", directory], environment: env)
        try? FileManager.default.removeItem(atPath: directory)
    }
}

/// Runs `body` with a private broker and stops the broker afterwards, whether `body` threw or not.
public func withPrivateBroker<T>(frameMax: Int? = nil, _ body: (PrivateBroker) async throws -> T) async throws -> T {
    let broker = try await PrivateBroker.start(frameMax: frameMax)
    do {
        let result = try await body(broker)
        await broker.stop()
        return result
    } catch {
        await broker.stop()
        throw error
    }
}

/// The repository root, found from this file's path.
public let repositoryRoot: String = {
    var url = URL(fileURLWithPath: #filePath)
    for _ in 0..<3 { url.deleteLastPathComponent() }  // Tests/TestSupport/TestSupport.swift
    return url.path
}()

/// A name no other test uses, for queues and bundle IDs: `prefix.<8 hex>`.
public func uniqueName(_ prefix: String) -> String {
    "\(prefix).\(UUID().uuidString.prefix(8).lowercased())"
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
public func freePort() throws -> Int {
    let socket = try LoopbackSocket(reusable: false)
    defer { close(socket.fd) }
    return socket.port
}

/// A TCP port of 127.0.0.1 for a server a test starts, and may stop and start again (a broker
/// node, a PostgreSQL cluster): free now, and below the kernel's range of ports for outgoing
/// connections (`ip_local_port_range`, 32768–60999 on Debian), which `freePort()` draws from too.
/// A broker on such a port lost it to some test's connection while its application was
/// stopped, and `start_app` failed with `eaddrinuse`. Taken in turn from 20000–24999, which no
/// fixed port of the tests uses (the brokers' are 5xxx, 15xxx and 25xxx), from a random start so
/// that two test processes seldom meet, each tried with a bind first.
public func serverPort() throws -> Int {
    guard serverPorts.upperBound <= ephemeralPortsStart else { return try freePort() }
    for _ in serverPorts {
        let port = serverPorts.lowerBound + serverPortTurn.wrappingAdd(1, ordering: .relaxed).oldValue % serverPorts.count
        if let socket = try? LoopbackSocket(reusable: false, port: port) {
            close(socket.fd)
            return port
        }
    }
    throw TestSupportError("no port of 127.0.0.1 in \(serverPorts) is free")
}

private let serverPorts = 20_000..<25_000
private let serverPortTurn = Atomic<Int>(Int.random(in: 0..<5_000))

/// The first port the kernel gives outgoing connections and `bind` to port 0.
private let ephemeralPortsStart: Int = {
    let range = (try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? ""
    return range.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? 32_768
}()

/// A TCP port on 127.0.0.1 that nothing listens on while the test process runs, for tests of
/// "nobody there": a bound socket that never listens holds it (without SO_REUSEADDR, so no
/// server can bind it, and the kernel's choice of ports passes it by). A port from `freePort()`
/// is only free until another test's server or connection happens to take it.
public let unreachablePort: Int = {
    do {
        return try LoopbackSocket(reusable: false).port  // its socket is kept open on purpose
    } catch {
        fatalError("no port of 127.0.0.1 to hold: \(error)")
    }
}()

/// A TCP port on 127.0.0.1 held by a bound socket that does not listen, until `release()`: a
/// connection to it is refused, as to a port nobody uses, and no other socket can take it (bind
/// and the kernel's choice of ports for new connections both pass it by), but a server that sets
/// SO_REUSEADDR (the simulator does) can bind it and listen. For a test that needs "nobody there"
/// first and its own server on the same port later: a port freed in between was taken once, by
/// another test's connection, in the 2 s between.
public final class ReservedPort: Sendable {
    public let port: Int
    private let fd: Int32

    public init() throws {
        let socket = try LoopbackSocket(reusable: true)
        (fd, port) = (socket.fd, socket.port)
    }

    public func release() { close(fd) }
}

/// A TCP socket bound to a port of 127.0.0.1 (0: one the kernel chose); the caller closes `fd`.
struct LoopbackSocket {
    let fd: Int32
    let port: Int

    init(reusable: Bool, port: Int = 0) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TestSupportError("socket() failed") }
        var on: Int32 = 1
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = (!reusable || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size)) == 0)
            && withUnsafeMutablePointer(to: &addr, {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0 }
            })
        guard ok else {
            close(fd)
            throw TestSupportError("could not bind a port of 127.0.0.1")
        }
        self.fd = fd
        self.port = Int(UInt16(bigEndian: addr.sin_port))
    }
}

public struct ProcessResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs a program to completion and collects its output.
///
/// Built on posix_spawn and waitpid rather than Foundation's `Process`: with `Process` on Linux,
/// a child that daemonizes (rabbitmq-server under `broker.sh`) left `waitUntilExit` hanging.
/// Output goes through temporary files, so no pipe can stay open in a grandchild.
public func runProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> ProcessResult {
    let base = NSTemporaryDirectory() + "apnsw-run-\(UUID().uuidString.prefix(8))"
    defer {
        try? FileManager.default.removeItem(atPath: base + ".out")
        try? FileManager.default.removeItem(atPath: base + ".err")
    }
    let pid = try spawn(executable, arguments, environment: environment ?? ProcessInfo.processInfo.environment,
                        stdoutPath: base + ".out", stderrPath: base + ".err")
    let status = await waitForChildOffThePool(pid)
    return ProcessResult(
        status: status,
        stdout: (try? String(contentsOfFile: base + ".out", encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOfFile: base + ".err", encoding: .utf8)) ?? "")
}

/// Starts `executable` with stdin from /dev/null and stdout/stderr to files (the same file when
/// `stderrPath` is nil). Returns the child's pid.
func spawn(_ executable: String, _ arguments: [String], environment: [String: String], stdoutPath: String, stderrPath: String?) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, stdoutPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    if let stderrPath {
        posix_spawn_file_actions_addopen(&actions, 2, stderrPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    } else {
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
    }
    let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
    guard result == 0 else { throw TestSupportError("could not start \(executable): errno \(result)") }
    return pid
}

/// Waits for the child on a thread of its own. The cooperative pool has one thread per core (two
/// on CI): a test blocked in waitpid for a Chromium run or a `rabbitmqctl` (seconds each) would
/// stall every other test's tasks in this process and make their timing assertions fail.
func waitForChildOffThePool(_ pid: pid_t) async -> Int32 {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: waitForChild(pid)) }.start()
    }
}

/// Blocks until the child exits; its exit code, or 128 + signal when a signal ended it.
func waitForChild(_ pid: pid_t) -> Int32 {
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    return decodeWaitStatus(status)
}

func decodeWaitStatus(_ status: Int32) -> Int32 {
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

/// The `apns-worker` executable the tests run: `APNS_TEST_BIN_PATH` (set by `scripts/test`),
/// else the debug build folder.
public var workerExecutable: String {
    let bin = ProcessInfo.processInfo.environment["APNS_TEST_BIN_PATH"] ?? (repositoryRoot + "/.build/debug")
    return bin + "/apns-worker"
}

/// A child process that keeps running while the test goes on (a worker, a simulator), its
/// output going to a log file the test can read.
public final class ChildProcess: Sendable {
    public let logPath: String
    public let pid: Int32
    /// The exit status once the child has been reaped.
    private let exitStatus = Mutex<Int32?>(nil)

    public init(_ executable: String, _ arguments: [String], logPath: String, environment: [String: String] = [:]) throws {
        var env = ProcessInfo.processInfo.environment
        for (key, value) in environment { env[key] = value }
        self.pid = try spawn(executable, arguments, environment: env, stdoutPath: logPath, stderrPath: nil)
        self.logPath = logPath
    }

    /// Reaps the child if it has exited (never blocks).
    private func poll() -> Int32? {
        exitStatus.withLock { known in
            if let known { return known }
            var status: Int32 = 0
            if waitpid(pid, &status, WNOHANG) == pid { known = decodeWaitStatus(status) }
            return known
        }
    }

    public var isRunning: Bool { poll() == nil }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits up to `timeout` for the process to exit; its exit status, or nil if it still runs.
    public func waitForExit(timeout: Duration) async -> Int32? {
        var budget = PollBudget(timeout, every: .milliseconds(50))
        while true {
            if let status = poll() { return status }
            if budget.spent() { return nil }
            try? await Task.sleep(for: .milliseconds(50))
        }
    }

    /// Stops the process if it still runs (SIGKILL) and reaps it, for test clean-up.
    public func kill9() {
        guard isRunning else { return }
        kill(pid, SIGKILL)
        exitStatus.withLock { known in
            if known == nil { known = waitForChild(pid) }
        }
    }

    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}

/// Polls `condition` until it holds or `timeout` passes; throws with `what` on time-out. The
/// default deadline is long because it costs a passing test nothing, and on CI's loaded two cores
/// a worker process can take half a minute to start and take its first job. The time counts as
/// `PollBudget` counts it: a stall of the whole test process does not use it up.
public func waitUntil(
    _ what: @autoclosure () -> String, timeout: Duration = .seconds(60), every interval: Duration = .milliseconds(100),
    isolation: isolated (any Actor)? = #isolation, _ condition: () async throws -> Bool
) async throws {
    var budget = PollBudget(timeout, every: interval)
    while try await !condition() {
        if budget.spent() { throw TestSupportError("timed out after \(timeout) waiting for \(what())") }
        try await Task.sleep(for: interval)
    }
}

/// The time a polling wait has had to see its condition, which is not always the time that
/// passed. The tests share one process whose cooperative pool has a thread per core (two on CI);
/// while the suites start together, other tests' work can hold both for a minute, and then no
/// poll runs and nothing the wait is waiting for moves either. A wall-clock deadline ran out in
/// that minute and failed ten unrelated waits at once, each on its first poll after the stall.
/// So a round of polling counts at most its interval and a second, however late it came back:
/// a wait still ends (every round counts something), a condition that never holds still fails
/// after `timeout` of polling, and a stall costs only wall time.
public struct PollBudget {
    private let timeout: Duration
    private let mostPerRound: Duration
    private var counted: Duration = .zero
    private var last: ContinuousClock.Instant

    public init(_ timeout: Duration, every interval: Duration, from start: ContinuousClock.Instant = .now) {
        self.timeout = timeout
        self.mostPerRound = interval + .seconds(1)
        self.last = start
    }

    /// Counts the round since the last call; whether the budget is now spent.
    public mutating func spent(at now: ContinuousClock.Instant = .now) -> Bool {
        counted += min(now - last, mostPerRound)
        last = now
        return counted >= timeout
    }
}
