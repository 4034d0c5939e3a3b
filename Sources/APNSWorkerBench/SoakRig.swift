/// What the soak runs and controls from outside: a RabbitMQ node of its own (`scripts/broker.sh`,
/// stopped and started again during the run), the real `apns-worker` as a child process (SIGHUP,
/// its operator commands), and `curl` for the management API and the worker's admin.
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Runs a child to its end, its output in a file. posix_spawn and waitpid, as the tests'
/// `runProcess`, not Foundation's `Process`: `broker.sh start` leaves rabbitmq-server running, and
/// `Process` on Linux was seen to wait for such a grandchild.
func runSoakProcess(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) async -> (status: Int32, output: String) {
    let outputPath = NSTemporaryDirectory() + "apnsw-soak-\(UUID().uuidString.prefix(8)).out"
    defer { try? FileManager.default.removeItem(atPath: outputPath) }
    guard let pid = try? spawnSoakChild(executable, arguments, environment: environment ?? ProcessInfo.processInfo.environment, outputPath: outputPath)
    else { return (-1, "could not start \(executable)") }
    // Off the cooperative pool: a blocked waitpid there would stall the sampler for seconds.
    let status: Int32 = await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: reapSoakChild(pid, options: 0) ?? -1) }.start()
    }
    return (status, (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "")
}

/// Starts `executable` with stdin from /dev/null and stdout and stderr to `outputPath`.
func spawnSoakChild(_ executable: String, _ arguments: [String], environment: [String: String], outputPath: String) throws -> pid_t {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
    posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_APPEND, 0o644)
    posix_spawn_file_actions_adddup2(&actions, 1, 2)
    let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
    let envp: [UnsafeMutablePointer<CChar>?] = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer {
        for pointer in argv { free(pointer) }
        for pointer in envp { free(pointer) }
    }
    var pid: pid_t = 0
    let result = posix_spawn(&pid, executable, &actions, nil, argv, envp)
    guard result == 0 else { throw SoakError("could not start \(executable): errno \(result)") }
    return pid
}

/// waitpid: the exit code, or 128 + the signal that ended it; nil while it runs (`WNOHANG`).
func reapSoakChild(_ pid: pid_t, options: Int32) -> Int32? {
    var status: Int32 = 0
    var result = waitpid(pid, &status, options)
    while result == -1 && errno == EINTR { result = waitpid(pid, &status, options) }
    guard result == pid else { return nil }
    let signal = status & 0x7f
    return signal == 0 ? (status >> 8) & 0xff : 128 + signal
}

/// The soak's RabbitMQ node, on ports picked once, so that a restart comes back where the
/// worker looks for it, with its queues and their messages (durable, in `directory`).
struct SoakBroker: Sendable {
    let directory: String
    let script: String
    let amqpPort: Int
    let managementPort: Int
    let distributionPort: Int

    var url: String { "amqp://guest:guest@127.0.0.1:\(amqpPort)/%2f" }
    var managementURL: String { "http://127.0.0.1:\(managementPort)" }

    /// A node on free ports; as `PrivateBroker` in the tests, a port taken between the pick and
    /// the bind fails the start, and another set is tried.
    static func start(directory: String, script: String) async throws -> SoakBroker {
        var failure = ""
        for attempt in 1...3 {
            let broker = SoakBroker(
                directory: directory + "-\(attempt)", script: script, amqpPort: try freeSoakPort(), managementPort: try freeSoakPort(),
                distributionPort: try freeSoakPort())
            if let problem = await broker.start() { failure = problem } else { return broker }
            await broker.stop()
        }
        throw SoakError("the soak's RabbitMQ node did not start: \(failure)")
    }

    private var environment: [String: String] {
        var environment = ProcessInfo.processInfo.environment
        environment["APNS_BROKER_PORT"] = String(amqpPort)
        environment["APNS_BROKER_MGMT_PORT"] = String(managementPort)
        environment["APNS_BROKER_DIST_PORT"] = String(distributionPort)
        // scripts/test exports these for its own node; this one is plain amqp on RabbitMQ's frames.
        for name in ["APNS_BROKER_TLS_PORT", "APNS_BROKER_FRAME_MAX", "APNS_BROKER_NODENAME"] { environment[name] = nil }
        return environment
    }

    /// nil when the node is up, else broker.sh's complaint.
    func start() async -> String? {
        let result = await runSoakProcess("/bin/bash", [script, "start", directory], environment: environment)
        return result.status == 0 ? nil : result.output
    }

    func stop() async {
        _ = await runSoakProcess("/bin/bash", [script, "stop", directory], environment: environment)
    }

    /// `kill -9` of the node, as a crash: what it confirmed must survive (contract §4).
    func kill() async {
        _ = await runSoakProcess("/bin/bash", [script, "kill", directory], environment: environment)
    }

    /// The management API's JSON at `path` (after `/api`), nil while it does not answer.
    func managementJSON(_ path: String) async -> Any? {
        await curlJSON(managementURL + "/api" + path, user: "guest:guest")
    }
}

/// GET with curl (as the tests reach the management API), decoded; nil on any failure.
func curlJSON(_ url: String, user: String? = nil) async -> Any? {
    var arguments = ["-fsS", "--max-time", "10"]
    if let user { arguments += ["-u", user] }
    let result = await runSoakProcess("/usr/bin/curl", arguments + [url])
    guard result.status == 0 else { return nil }
    return try? JSONSerialization.jsonObject(with: Data(result.output.utf8))
}

/// The worker under soak: `apns-worker run --config`, its output in `logPath`.
final class SoakWorker: Sendable {
    let pid: pid_t
    let executable: String
    let logPath: String
    private let exitStatus = Mutex<Int32?>(nil)

    init(executable: String, configPath: String, logPath: String) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["APNS_WORKER_LOG_LEVEL"] = environment["APNS_BENCH_WORKER_LOG_LEVEL"] ?? "info"
        pid = try spawnSoakChild(executable, ["run", "--config", configPath], environment: environment, outputPath: logPath)
        self.executable = executable
        self.logPath = logPath
    }

    /// nil while it runs, then its exit status (reaped once, never blocking).
    var exited: Int32? {
        exitStatus.withLock { known in
            if known == nil { known = reapSoakChild(pid, options: WNOHANG) }
            return known
        }
    }

    var isRunning: Bool { exited == nil }

    func reload() { if isRunning { kill(pid, SIGHUP) } }

    /// SIGTERM, and SIGKILL if it has not stopped within `grace`; its exit status.
    func stop(grace: Duration) async -> Int32 {
        if isRunning { kill(pid, SIGTERM) }
        let deadline = ContinuousClock.now + grace
        while isRunning, ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(100)) }
        if isRunning { kill(pid, SIGKILL) }
        while isRunning { try? await Task.sleep(for: .milliseconds(100)) }
        return exited ?? -1
    }

    /// `apns-worker pause|resume --url … --bundle …`: nil when it worked, else what it said.
    func fleetCommand(_ command: String, bundle: String, url: String) async -> String? {
        let result = await runSoakProcess(executable, [command, "--url", url, "--bundle", bundle])
        return result.status == 0 ? nil : "apns-worker \(command) exited \(result.status): \(result.output)"
    }

    /// The last `count` lines of its log.
    func logTail(_ count: Int) -> String {
        let text = (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? ""
        return text.split(separator: "\n", omittingEmptySubsequences: false).suffix(count).joined(separator: "\n")
    }
}

struct SoakError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A TCP port on 127.0.0.1 that nothing listens on right now.
func freeSoakPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw SoakError("socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw SoakError("bind() failed") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return Int(UInt16(bigEndian: address.sin_port))
}
