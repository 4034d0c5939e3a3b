/// `apns-worker-bench`: throughput, latency and memory figures for the README, in release mode.
import ArgumentParser

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-worker-bench",
        abstract: "Benchmarks: pure codecs, the AMQP client, the APNs transports and the whole worker.",
        subcommands: [PureBench.self, AMQPBench.self, TransportBench.self, BinaryBench.self, WorkerBench.self, RegistryBench.self]
    )
}
