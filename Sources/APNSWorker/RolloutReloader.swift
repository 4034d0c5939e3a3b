import AMQPClient
import Logging
import ServiceLifecycle
import UnixSignals

/// Reloads the rollout gate's rules on SIGHUP, without a restart: `kill -HUP <pid>` after
/// editing `allowSyncServers`, `denySyncServers` or `rolloutPercentage`. A file that no longer
/// loads is logged and ignored: the rules in force stay.
public struct RolloutReloader<Broker: MessageBroker>: Service {
    let pipelines: [BundlePipeline<Broker>]
    /// Reads the rules from the configuration again, keyed by bundle ID.
    let loadRules: @Sendable () throws -> [String: RolloutRule]
    let logger: Logger

    public init(pipelines: [BundlePipeline<Broker>], logger: Logger, loadRules: @escaping @Sendable () throws -> [String: RolloutRule]) {
        self.pipelines = pipelines
        self.loadRules = loadRules
        self.logger = logger
    }

    public func run() async throws {
        for await _ in await UnixSignalsSequence(trapping: .sighup).cancelOnGracefulShutdown() {
            reload()
        }
    }

    /// Applies the rules now in the configuration to every pipeline whose bundle is still there.
    public func reload() {
        do {
            let rules = try loadRules()
            for pipeline in pipelines {
                pipeline.updateRollout(rules[pipeline.settings.bundleID] ?? .open)
            }
            logger.notice("rollout rules reloaded", metadata: ["apns.bundles": "\(rules.count)"])
        } catch {
            logger.error("configuration reload failed; the rollout rules in force stay", metadata: ["error": "\(error)"])
        }
    }
}
