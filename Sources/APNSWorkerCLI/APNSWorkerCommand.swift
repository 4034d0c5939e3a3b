/// The `apns-worker` command: one executable for the worker, the simulator and operator tools.
import APNSConfig
import ArgumentParser
import Foundation

@main
struct APNSWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-worker",
        abstract: "Delivers Apple push notifications from RabbitMQ job queues.",
        version: APNSWorkerVersion.current,
        subcommands: [
            RunCommand.self, PublishCommand.self, CheckConfigCommand.self, SimulatorCommand.self, TopologyCommand.self,
            DeadCommand.self, RetryCommand.self, RegistryCommand.self, StatsCommand.self, FleetCommand.self,
            PauseCommand<PauseBundle>.self, PauseCommand<ResumeBundle>.self, ChannelsCommand.self, EventsCommand.self,
        ]
    )

    /// ArgumentParser's entry, after the environment every command reads (the log level) is
    /// checked: a bad value ends start-up with its one line and exit 1, before any command runs.
    static func main() async {
        // The worker's heap, bounded before its threads start (the other commands keep glibc's).
        if CommandLine.arguments.dropFirst().first == RunCommand.configuration.commandName { MallocArenas.bound() }
        do {
            _ = try LogLevelEnvironment.level(ProcessInfo.processInfo.environment)
        } catch {
            FileHandle.standardError.write(Data("\(error)\n".utf8))
            Foundation.exit(1)
        }
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            Self.exit(withError: error)
        }
    }
}

enum APNSWorkerVersion {
    static let current = "0.1.0"
}
