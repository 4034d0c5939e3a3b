/// `apns-worker dead …` and `apns-worker retry …`: list, show, requeue and purge the jobs of the
/// dead or retry queues (contract §5). One implementation serves both kinds of queue.
import AMQPClient
import APNSConfig
import APNSModel
import APNSOperations
import ArgumentParser
import Foundation
import Logging

/// Chooses the kind of queue a generic job-queue command works on.
protocol JobQueueKindChoice: Sendable {
    static var kind: JobQueueKind { get }
}

enum DeadQueues: JobQueueKindChoice { static var kind: JobQueueKind { .dead } }
enum RetryQueues: JobQueueKindChoice { static var kind: JobQueueKind { .retry } }

struct DeadCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "dead",
        abstract: "Inspect, requeue or purge the jobs in the dead queues (apns.<bundle>.dead).",
        subcommands: [ListJobs<DeadQueues>.self, ShowJob<DeadQueues>.self, RequeueJobs<DeadQueues>.self, PurgeJobs<DeadQueues>.self])
}

struct RetryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "retry",
        abstract: "Inspect, requeue or purge the jobs waiting in the retry queues (apns.<bundle>.retry.<delay>).",
        subcommands: [ListJobs<RetryQueues>.self, ShowJob<RetryQueues>.self, RequeueJobs<RetryQueues>.self, PurgeJobs<RetryQueues>.self])
}

/// Where the queues are: the broker and, from `--config`, the bundles and retry delays.
struct QueueScopeOptions: ParsableArguments {
    @OptionGroup var broker: BrokerOptions

    @Option(help: "Only this bundle ID's queues (needed without --config and without \(BrokerOptions.defaultConfigPath)).")
    var bundle: String?

    /// The inspector for the configured bundles (or `--bundle`) and retry delays (the
    /// configuration's, else the defaults). Without `--config`, `--bundle` or `--url`, the
    /// worker's default configuration file, as `run` reads it.
    func inspector(_ kind: JobQueueKind) throws -> QueueInspector {
        var broker = self.broker
        if broker.configPath == nil, broker.url == nil, bundle == nil,
            FileManager.default.fileExists(atPath: BrokerOptions.defaultConfigPath)
        {
            broker.configPath = BrokerOptions.defaultConfigPath
        }
        let configuration = try broker.configPath.map { try loadConfiguration($0, credentials: .skipFiles) }
        let bundles: [String]
        if let bundle {
            bundles = [bundle]
        } else if let configuration {
            bundles = configuration.bundles.map(\.bundleID)
        } else {
            throw ValidationError("give --config (for its bundles) or --bundle")
        }
        let delays = configuration?.retry.delays ?? RetrySettings().delays
        let amqp = try broker.amqpConfiguration(connectionName: "apns-worker \(kind.rawValue)")
        return QueueInspector(
            amqp: amqp, bundleIDs: bundles, retryDelays: delays, logger: broker.logger("apns-worker.\(kind.rawValue)"))
    }
}

/// `--reason`, `--older-than`, `--newer-than`.
struct JobFilterOptions: ParsableArguments {
    @Option(help: "Only jobs with this x-apns-reason (or x-apns-last-reason), e.g. BadDeviceToken.")
    var reason: String?

    @Option(help: "Only jobs that failed at least this long ago, e.g. 10m, 2h, 1h30m.", transform: parseDuration)
    var olderThan: Duration?

    @Option(help: "Only jobs that failed at most this long ago.", transform: parseDuration)
    var newerThan: Duration?

    func filter(bundle: String?) -> JobFilter {
        JobFilter(bundleID: bundle, reason: reason, olderThan: olderThan, newerThan: newerThan)
    }

    var isEmpty: Bool { reason == nil && olderThan == nil && newerThan == nil }
}

func parseDuration(_ text: String) throws -> Duration {
    guard let duration = DurationText.parse(text) else {
        throw ValidationError("'\(text)' is not a duration (\(DurationText.hint))")
    }
    return duration
}

struct ListJobs<Choice: JobQueueKindChoice>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "list",
            abstract: "List the \(Choice.kind.rawValue) jobs without consuming or reordering them.")
    }

    @OptionGroup var scope: QueueScopeOptions
    @OptionGroup var filters: JobFilterOptions

    @Option(help: "At most this many jobs.")
    var limit: Int?

    @Option(help: "Skip this many matching jobs first (the next page starts at offset + limit).")
    var offset: Int = 0

    @Flag(help: "Print a JSON array instead of a table.")
    var json = false

    func validate() throws {
        if let limit, limit < 1 { throw ValidationError("--limit must be at least 1") }
        if offset < 0 { throw ValidationError("--offset must be 0 or more") }
    }

    /// Pages through the queues: every job is printed (JSON) or cut to its table row as it is
    /// read, so a queue of 65,535 big jobs never sits in memory whole.
    func run() async throws {
        let inspector = try scope.inspector(Choice.kind)
        let filter = filters.filter(bundle: scope.bundle)
        var rows: [QueuedJob] = []
        var first = true
        if json { print("[") }
        _ = try await operatorCall {
            try await inspector.forEachJob(Choice.kind, filter: filter, offset: offset, limit: limit) { job in
                if json {
                    print((first ? "" : ",\n") + jsonText(job), terminator: "")
                    first = false
                } else {
                    var row = job
                    row.body = ""
                    row.headers = [:]
                    rows.append(row)
                }
            }
        }
        if json {
            print(first ? "]" : "\n]")
        } else {
            print(JobTable.render(rows, kind: Choice.kind, now: Date()), terminator: "")
        }
    }
}

struct ShowJob<Choice: JobQueueKindChoice>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(commandName: "show", abstract: "Show one \(Choice.kind.rawValue) job with its headers and body.")
    }

    @OptionGroup var scope: QueueScopeOptions

    @Argument(help: ArgumentHelp("The job id (the body's id, else the AMQP message_id).", valueName: "job-id"))
    var jobID: String

    @Flag(help: "Print a JSON object.")
    var json = false

    func run() async throws {
        let inspector = try scope.inspector(Choice.kind)
        guard let job = try await operatorCall({ try await inspector.show(Choice.kind, jobID: jobID, bundleID: scope.bundle) }) else {
            failWithLine("no job \(jobID) in the \(Choice.kind.rawValue) queues")
        }
        if json {
            printJSON(job)
        } else {
            print(JobTable.describe(job, now: Date()), terminator: "")
        }
    }
}

struct RequeueJobs<Choice: JobQueueKindChoice>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(
            commandName: "requeue",
            abstract: "Move \(Choice.kind.rawValue) jobs back to their work queue (attempts reset, reason kept in x-apns-last-reason).",
            discussion: "Each job is published with a broker confirm before it is acked: if interrupted, a job may be in both queues, never in neither.")
    }

    @OptionGroup var scope: QueueScopeOptions
    @OptionGroup var filters: JobFilterOptions

    @Argument(help: ArgumentHelp("Job ids to requeue.", valueName: "job-id"))
    var jobIDs: [String] = []

    @Flag(help: "Requeue every job the filters select.")
    var all = false

    @Flag(help: "Print a JSON object.")
    var json = false

    func validate() throws {
        try validateSelection(jobIDs: jobIDs, all: all, filters: filters)
    }

    func run() async throws {
        let inspector = try scope.inspector(Choice.kind)
        let selection: JobSelection = all ? .all(filters.filter(bundle: scope.bundle)) : .jobIDs(jobIDs)
        let progress = TerminalProgress.make(verb: "requeued", json: json)
        // The line ends before the report, or before the error line of a broker failure.
        let report = try await operatorCall {
            defer { progress?.finish() }
            return try await inspector.requeue(Choice.kind, selection, progress: progress?.handler)
        }
        if json {
            printJSON(report)
        } else {
            print("requeued \(report.moved) \(Choice.kind.rawValue) job(s) to their work queue")
            for id in report.withoutTheirHeaders {
                print("without its headers: \(id) (dropped for size when it died; requeued without them)")
            }
            for id in report.notFound { print("not found: \(id)") }
        }
        if !report.notFound.isEmpty { throw ExitCode.failure }
    }
}

struct PurgeJobs<Choice: JobQueueKindChoice>: AsyncParsableCommand {
    static var configuration: CommandConfiguration {
        CommandConfiguration(commandName: "purge", abstract: "Drop \(Choice.kind.rawValue) jobs for good.")
    }

    @OptionGroup var scope: QueueScopeOptions
    @OptionGroup var filters: JobFilterOptions

    @Argument(help: ArgumentHelp("Job ids to drop.", valueName: "job-id"))
    var jobIDs: [String] = []

    @Flag(help: "Drop every job the filters select (needs --yes).")
    var all = false

    @Flag(help: "Confirm dropping with --all.")
    var yes = false

    @Flag(help: "Print a JSON object.")
    var json = false

    func validate() throws {
        try validateSelection(jobIDs: jobIDs, all: all, filters: filters)
    }

    func run() async throws {
        if all && !yes {
            failWithLine("refusing to purge every selected \(Choice.kind.rawValue) job without --yes")
        }
        let inspector = try scope.inspector(Choice.kind)
        let selection: JobSelection = all ? .all(filters.filter(bundle: scope.bundle)) : .jobIDs(jobIDs)
        let progress = TerminalProgress.make(verb: "purged", json: json)
        // The line ends before the report, or before the error line of a broker failure.
        let report = try await operatorCall {
            defer { progress?.finish() }
            return try await inspector.purge(Choice.kind, selection, progress: progress?.handler)
        }
        if json {
            printJSON(report)
        } else {
            print("purged \(report.purged) \(Choice.kind.rawValue) job(s)")
            for id in report.notFound { print("not found: \(id)") }
        }
        // As `requeue`: a script learns that an id it named was not there.
        if !report.notFound.isEmpty { throw ExitCode.failure }
    }
}

private func validateSelection(jobIDs: [String], all: Bool, filters: JobFilterOptions) throws {
    if all && !jobIDs.isEmpty { throw ValidationError("give job ids or --all, not both") }
    if !all && jobIDs.isEmpty { throw ValidationError("give job ids or --all") }
    if !all && !filters.isEmpty { throw ValidationError("--reason, --older-than and --newer-than select jobs with --all only") }
}

/// Runs a broker operation, turning a broker error into one line on stderr and exit 1.
func operatorCall<Result>(isolation: isolated (any Actor)? = #isolation, _ body: () async throws -> Result) async throws -> Result {
    do {
        return try await body()
    } catch let error as AMQPError {
        failWithLine("broker: \(error)")
    }
}

/// Prints `message` on stderr and exits 1.
func failWithLine(_ message: String) -> Never {
    FileHandle.standardError.write(Data("apns-worker: \(message)\n".utf8))
    APNSWorkerCommand.exit(withError: ExitCode.failure)
}

/// Stable machine output: sorted keys, RFC 3339 dates.
func printJSON(_ value: some Encodable) {
    print(jsonText(value))
}

func jsonText(_ value: some Encodable) -> String {
    let encoder = JSONEncoder()
    encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
    encoder.dateEncodingStrategy = .rfc3339
    // Encoding these plain value types cannot fail.
    let data = (try? encoder.encode(value)) ?? Data("null".utf8)
    return String(decoding: data, as: UTF8.self)
}

/// The human output of `list` and `show`.
enum JobTable {
    static func render(_ jobs: [QueuedJob], kind: JobQueueKind, now: Date) -> String {
        guard !jobs.isEmpty else { return "no \(kind.rawValue) jobs\n" }
        var header = ["POS", "JOB ID", "BUNDLE"]
        if kind == .retry { header.append("QUEUE") }
        header += ["REASON", "STATUS", "ATTEMPTS", "AGE", "TOKEN"]
        var rows = [header]
        for job in jobs {
            var row = [String(job.position), job.jobID ?? "-", job.bundleID]
            if kind == .retry { row.append(job.queue) }
            row += [
                job.reason ?? job.lastReason.map { "(last: \($0))" } ?? "-",
                job.status.map(String.init) ?? "-",
                job.attempts.map(String.init) ?? "-",
                job.referenceDate.map { age(now.timeIntervalSince($0)) } ?? "-",
                job.tokenRedacted ?? "-",
            ]
            rows.append(row)
        }
        return aligned(rows) + "\(jobs.count) job(s)\n"
    }

    static func describe(_ job: QueuedJob, now: Date) -> String {
        var lines: [[String]] = [
            ["job id", job.jobID ?? "-"], ["bundle", job.bundleID], ["queue", job.queue],
            ["position", String(job.position)], ["reason", job.reason ?? "-"],
            ["status", job.status.map(String.init) ?? "-"], ["attempts", job.attempts.map(String.init) ?? "-"],
            ["failed at", job.failedAt.map { "\(RFC3339.string(from: $0)) (\(age(now.timeIntervalSince($0))) ago)" } ?? "-"],
            ["error", job.error ?? "-"], ["last reason", job.lastReason ?? "-"], ["token", job.tokenRedacted ?? "-"],
        ]
        var out = aligned(lines)
        out += "headers:\n"
        lines = job.headers.keys.sorted().map { ["  \($0)", job.headers[$0] ?? ""] }
        out += aligned(lines)
        // The body holds the full device token: print it with the token replaced.
        out += "body:\n  \(JobInspection.redactingToken(job.body))\n"
        return out
    }

    /// `42s`, `5m`, `3h12m`, `2d4h`.
    static func age(_ seconds: TimeInterval) -> String {
        // Clamped: a message's timestamp can be anything a publisher wrote, far past or future.
        let s = seconds.isFinite ? Int(max(0, min(seconds, 1e15))) : 0
        if s < 60 { return "\(s)s" }
        if s < 3600 { return "\(s / 60)m" }
        if s < 86400 { return s % 3600 / 60 == 0 ? "\(s / 3600)h" : "\(s / 3600)h\(s % 3600 / 60)m" }
        return s % 86400 / 3600 == 0 ? "\(s / 86400)d" : "\(s / 86400)d\(s % 86400 / 3600)h"
    }

    static func aligned(_ rows: [[String]]) -> String {
        let columns = rows.map(\.count).max() ?? 0
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        var out = ""
        for row in rows {
            let cells = row.enumerated().map { i, cell in
                i == row.count - 1 ? cell : cell.padding(toLength: widths[i], withPad: " ", startingAt: 0)
            }
            var line = cells.joined(separator: "  ")
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        return out
    }
}
