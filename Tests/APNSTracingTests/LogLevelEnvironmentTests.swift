import APNSConfig
import Foundation
import Logging
import Testing
import TestSupport

/// `APNS_WORKER_LOG_LEVEL` naming no level stops every command with one line
/// naming the variable (it was quietly the default). Next to the `OTEL_*` checks: both are
/// environment the process reads before its configuration.
@Suite struct LogLevelEnvironmentTests {
    @Test func theNamesAreSwiftLogsLevels() {
        #expect(LogLevelEnvironment.levels == Logger.Level.allCases.map(\.rawValue))
    }

    @Test func levelsInAnyCaseAndAnEmptyValueAreAccepted() throws {
        #expect(try LogLevelEnvironment.level([:]) == nil)
        #expect(try LogLevelEnvironment.level(["APNS_WORKER_LOG_LEVEL": ""]) == nil)
        #expect(try LogLevelEnvironment.level(["APNS_WORKER_LOG_LEVEL": "debug"]) == "debug")
        #expect(try LogLevelEnvironment.level(["APNS_WORKER_LOG_LEVEL": "WARNING"]) == "warning")
    }

    @Test(arguments: ["verbose", "warn", " info", "debug\nerror"])
    func anythingElseIsOneLineNamingTheVariable(value: String) throws {
        let error = try #require(throws: ConfigurationError.self) { try LogLevelEnvironment.level(["APNS_WORKER_LOG_LEVEL": value]) }
        #expect(error.location == .environment(variable: "APNS_WORKER_LOG_LEVEL"))
        #expect(error.description.contains("is not a log level; use trace, debug, info, notice, warning, error, critical"), "\(error)")
        #expect(!error.description.contains("\n"))
    }

    /// The real binary, as an operator starts it: exit 1 and one line, before the command runs.
    @Test(arguments: [["run", "--config"], ["check-config"]])
    func theWorkerRefusesAnUnknownLevelWithOneLine(command: [String]) async throws {
        let path = try OTelEnvironmentTests.writeConfig(tracing: false)
        var environment = ProcessInfo.processInfo.environment
        environment["APNS_WORKER_LOG_LEVEL"] = "verbose"
        let result = try await runProcess(workerExecutable, command + [path], environment: environment)
        #expect(result.status == 1, "exit status \(result.status): \(result.stderr)")
        #expect(
            result.stderr
                == "environment APNS_WORKER_LOG_LEVEL: \"verbose\" is not a log level; use trace, debug, info, notice, warning, error, critical, or unset APNS_WORKER_LOG_LEVEL\n")
        // A level it knows, in any case, is taken.
        environment["APNS_WORKER_LOG_LEVEL"] = "Debug"
        let accepted = try await runProcess(workerExecutable, ["check-config", path], environment: environment)
        #expect(accepted.status == 0, "exit status \(accepted.status): \(accepted.stderr)")
    }
}
