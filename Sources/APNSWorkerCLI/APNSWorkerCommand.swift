/// The `apns-worker` command: one executable for the worker, the simulator and operator tools.
import ArgumentParser

@main
struct APNSWorkerCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-worker",
        abstract: "Delivers Apple push notifications from RabbitMQ job queues.",
        version: APNSWorkerVersion.current,
        subcommands: [
            RunCommand.self, PublishCommand.self, CheckConfigCommand.self, SimulatorCommand.self, TopologyCommand.self,
            DeadCommand.self, RetryCommand.self, RegistryCommand.self, StatsCommand.self, FleetCommand.self,
            PauseCommand<PauseBundle>.self, PauseCommand<ResumeBundle>.self, ChannelsCommand.self,
        ]
    )
}

enum APNSWorkerVersion {
    static let current = "0.1.0"
}
