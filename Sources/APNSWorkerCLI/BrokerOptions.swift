import AMQPClient
import APNSConfig
import ArgumentParser
import Foundation
import Logging

/// Where a command finds the broker: `--url` wins, then the configuration file's `[amqp]`
/// (with its environment overrides), then the local broker of `scripts/broker.sh`.
struct BrokerOptions: ParsableArguments {
    @Option(name: .customLong("config"), help: "Configuration file whose [amqp] section to use.")
    var configPath: String?

    @Option(name: .customLong("url"), help: "AMQP URL (overrides --config).")
    var url: String?

    @Flag(help: "Also log connections and progress (info) on stderr; without it only warnings and errors.")
    var verbose = false

    static let localURL = "amqp://guest:guest@127.0.0.1:5682/%2f"
    /// Where `run` (and the operator commands, when given neither `--config` nor `--bundle`)
    /// read the configuration.
    static let defaultConfigPath = "/etc/apns-worker/apns-worker.conf"

    func amqpConfiguration(connectionName: String) throws -> AMQPConfiguration {
        let urls: [String]
        var heartbeat: Duration = .seconds(30)
        var caFile: String?
        if let url {
            urls = [url]
        } else if let configPath {
            let configuration = try loadConfiguration(configPath, credentials: .skipFiles)
            urls = configuration.amqp.urls
            heartbeat = configuration.amqp.heartbeat
            caFile = configuration.amqp.caFile
        } else {
            urls = [ProcessInfo.processInfo.environment["APNS_WORKER_AMQP_URL"] ?? Self.localURL]
        }
        var amqp = try AMQPConfiguration(urlStrings: urls, connectionName: connectionName)
        amqp.heartbeat = heartbeat
        if let caFile { amqp.tls.caFile = caFile }
        return amqp
    }

    /// The logger of a one-shot command: its answer is what it prints, so its log (on stderr)
    /// says only warnings and errors unless `--verbose` or `APNS_WORKER_LOG_LEVEL` asks for more.
    func logger(_ label: String) -> Logger {
        makeLogger(label, defaultLevel: verbose ? .info : .warning)
    }
}

/// Loads a configuration file, turning its error into the one line the operator needs and exit 1.
func loadConfiguration(_ path: String, credentials: ConfigurationLoader.CredentialValidation = .verifyFiles) throws -> WorkerConfiguration {
    do {
        return try ConfigurationLoader.load(path: path, credentials: credentials)
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        throw ExitCode.failure
    }
}

/// A console logger for the CLI, level from `APNS_WORKER_LOG_LEVEL` (default `defaultLevel`:
/// info, warning for the operator commands, whose output is their answer). The variable was
/// checked when the command started (`APNSWorkerCommand.main`), so a value here is a level.
func makeLogger(_ label: String, defaultLevel: Logger.Level = .info) -> Logger {
    var logger = Logger(label: label)
    let level = (try? LogLevelEnvironment.level(ProcessInfo.processInfo.environment)).flatMap(Logger.Level.init(rawValue:))
    logger.logLevel = level ?? defaultLevel
    return logger
}
