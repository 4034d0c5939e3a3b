/// `apns-worker-bench`: throughput, latency and memory figures for docs/benchmarks.md, in release mode.
import ArgumentParser

@main
struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apns-worker-bench",
        abstract: "Benchmarks: pure codecs, the AMQP client, the APNs transports, the whole worker and its cost at scale.",
        subcommands: [
            PureBench.self, AMQPBench.self, TransportBench.self, BinaryBench.self, WorkerBench.self, ScaleBench.self, RegistryBench.self,
            AttackBench.self, RoundTripBench.self, SoakBench.self,
        ]
    )
}
