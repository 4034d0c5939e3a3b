// swift-tools-version: 6.2
import PackageDescription

// Every target builds in Swift 6 language mode with strict concurrency; CI adds
// -warnings-as-errors so a warning fails the build.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

// How `apns-worker` is linked on Linux, for resident memory (docs/benchmarks.md, "Resident memory";
// docs/decisions.md, "Linking for resident memory"): lld with relative relocations packed
// (DT_RELR; gold's 2 MiB of R_X86_64_RELATIVE entries were read by ld.so at every start and stayed
// resident), and no dynamic export of the executable's own symbols (the static Swift runtime's
// link arguments export all ~200,000 of them: 3.5 MiB of symbol tables touched by every lookup
// ld.so makes). Needs lld (in the Swift toolchain) and glibc 2.36 at run time (Debian 12).
let residentLinkerSettings: [LinkerSetting] = [
    .unsafeFlags(
        ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs", "-Xlinker", "--no-export-dynamic"],
        .when(platforms: [.linux])
    ),
]

// The sync server's client and the modules it is built from are a package of their own (Client/,
// docs/decisions.md, "The client's own package"), so that a sync server resolves only what they
// need; this package uses them as that package's products.
func client(_ module: String) -> Target.Dependency { .product(name: module, package: "Client") }

let package = Package(
    name: "apns-worker",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "apns-worker", targets: ["APNSWorkerCLI"]),
        .executable(name: "apns-worker-bench", targets: ["APNSWorkerBench"]),
        .executable(name: "amqp-c-loop", targets: ["AMQPCLoop"]),
        .executable(name: "h2-floor", targets: ["HTTP2Floor"]),
        // The pure modules the libFuzzer package in Fuzz/ (which depends on this one by path) fuzzes.
        .library(name: "APNSBinaryProtocol", targets: ["APNSBinaryProtocol"]),
        .library(name: "APNSFleet", targets: ["APNSFleet"]),
        .library(name: "APNSAdminQuery", targets: ["APNSAdminQuery"]),
        .library(name: "APNSConfig", targets: ["APNSConfig"]),
        .library(name: "APNSTopology", targets: ["APNSTopology"]),
    ],
    dependencies: [
        .package(path: "Client"),
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-configuration.git", from: "1.4.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", from: "2.1.1"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.2"),
        // Traces over OTLP/HTTP protobuf only: the gRPC exporter (grpc-swift-2 and its transport)
        // is a trait left off, so a fresh clone never builds it (docs/decisions.md, "Traces across
        // the queue").
        .package(url: "https://github.com/swift-otel/swift-otel.git", from: "1.6.0", traits: ["OTLPHTTP"]),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
        .package(url: "https://github.com/swift-otel/swift-w3c-trace-context.git", from: "1.0.0"),
    ],
    targets: [
        // `amqp-c-loop`: the plain-C librabbitmq baseline that `apns-worker-bench amqp` runs beside AMQPClient.
        .executableTarget(name: "AMQPCLoop", dependencies: [client("CRabbitMQ")]),
        // `h2-floor`: SwiftNIO's HTTP/2 and TLS bare, a request at a time, the floor under the worker's CPU a job.
        .executableTarget(
            name: "HTTP2Floor",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictSettings
        ),

        // The pure modules: no IO, no clock read directly, tested without a network. Dependencies
        // point one way: APNSJSON ← APNSModel ← the others (docs/architecture.md, "Modules").
        // Apple's legacy binary provider API and feedback service on the wire, and the replay machine.
        .target(name: "APNSBinaryProtocol", dependencies: [client("APNSModel")], swiftSettings: strictSettings),
        // Where a job ends (contract §4): a transport result classified into an outcome.
        .target(name: "APNSOutcome", dependencies: [client("APNSModel"), "APNSBinaryProtocol"], swiftSettings: strictSettings),
        // Provider authentication tokens (JWT, ES256) and their renewal policy.
        .target(
            name: "APNSProviderToken",
            dependencies: [client("APNSJSON"), .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strictSettings
        ),
        // Apple's channel management API for broadcast push (contract §7) as values.
        .target(name: "APNSChannelManagement", dependencies: [client("APNSJSON"), client("APNSModel")], swiftSettings: strictSettings),
        // The fleet (contract §5): its messages, one listener's view, the rates and the memory bound.
        .target(name: "APNSFleet", dependencies: [client("APNSModel")], swiftSettings: strictSettings),
        // The admin server's query parameters, parsed; apart from APNSAdmin so that its fuzz target
        // (Fuzz/FuzzAdminQuery) builds without Hummingbird and everything the admin serves.
        .target(name: "APNSAdminQuery", dependencies: [client("APNSModel"), "APNSFleet"], swiftSettings: strictSettings),
        // A seeded random number generator for the simulator, the benchmarks and randomized tests
        // (a leaf: the standard library only).
        .target(name: "SeededRandom", swiftSettings: strictSettings),
        // The configuration file format and the typed configuration of the worker.
        .target(
            name: "APNSConfig",
            dependencies: [
                client("APNSModel"), "APNSChannelManagement", client("APNSTopologyNames"), client("AMQPURLSyntax"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictSettings
        ),
        // The APNs broker topology (contract §1, §6) as the client's declaration values, and
        // the one reader and writer of a job's AMQP headers (JobEnvelope).
        .target(
            name: "APNSTopology",
            dependencies: [
                client("APNSModel"), client("APNSTopologyNames"), "APNSConfig", client("AMQPClient"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSettings
        ),
        // APNs transports: HTTP/2 provider API (production) and the legacy binary provider API.
        .target(
            name: "APNSTransport",
            dependencies: [
                client("APNSModel"), "APNSBinaryProtocol", "APNSChannelManagement", "APNSProviderToken", client("CancellableWait"), "ServiceClock",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // An APNs stand-in that behaves like Apple over TLS + HTTP/2 and the binary protocol.
        .target(
            name: "APNSSimulator",
            dependencies: [
                client("APNSModel"), "APNSBinaryProtocol", "SeededRandom",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The injected clock (`ConsumerClock`) and the one periodic loop (`Periodic`, and the
        // stop one loop alone obeys, `StopSignal`) the consumers, the transports and the services
        // run on.
        .target(
            name: "ServiceClock",
            dependencies: [client("CancellableWait"), .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")],
            swiftSettings: strictSettings
        ),
        // One queue consumer with hold, probe, pause, drain and a delivery bound: a pure state
        // machine and its shell, run by the bundle pipelines and the registry's consumers.
        .target(
            name: "QueueConsumer",
            dependencies: [
                client("AMQPClient"), client("CancellableWait"), "ServiceClock",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The worker: per-bundle pipelines from the broker to APNs and back.
        .target(
            name: "APNSWorker",
            dependencies: [
                client("APNSModel"), "APNSBinaryProtocol", "APNSOutcome", "APNSFleet", client("APNSJSON"), client("APNSTopologyNames"),
                client("AMQPClient"), "APNSConfig", "APNSTopology", "APNSTransport", "QueueConsumer", "ServiceClock",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The device registry of contract §6 on PostgreSQL: schema and migrations, registrations,
        // group fan-out, invalid-token marks and counts; its message parsing and decisions are pure.
        .target(
            name: "APNSRegistry",
            dependencies: [
                client("APNSModel"), client("APNSRegistryMessages"), client("APNSTopologyNames"), "APNSConfig", client("AMQPClient"), "APNSTopology", "QueueConsumer",
                "ServiceClock",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // Operator access to the dead and retry queues: list without consuming, requeue, purge.
        .target(
            name: "APNSOperations",
            dependencies: [
                client("APNSModel"), client("APNSJSON"), client("APNSTopologyNames"), "APNSConfig", client("AMQPClient"), "APNSTopology",
                client("CancellableWait"), .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The admin HTTP surface: health, readiness, Prometheus metrics, the dead/retry JSON API and the HTML page.
        .target(
            name: "APNSAdmin",
            dependencies: [
                client("APNSModel"), "APNSAdminQuery", "APNSChannelManagement", "APNSFleet", client("APNSRegistryMessages"),
                client("APNSTopologyNames"), "APNSConfig", "APNSTopology", "APNSWorker", "APNSOperations", "APNSRegistry",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Mustache", package: "swift-mustache"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // `[tracing]`: the OpenTelemetry tracer and its OTLP/HTTP exporter (swift-otel) as a service.
        .target(
            name: "APNSTracing",
            dependencies: [
                "APNSConfig",
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        // The `apns-worker` command: run, simulator, publish, check-config, topology, dead, retry.
        .executableTarget(
            name: "APNSWorkerCLI",
            dependencies: [
                client("APNSModel"), client("APNSJSON"), "APNSChannelManagement", "APNSFleet", client("APNSRegistryMessages"), client("APNSTopologyNames"), "APNSConfig",
                client("AMQPClient"), "APNSTopology", "APNSTransport", "APNSSimulator",
                "APNSWorker", "APNSOperations", "APNSAdmin", "APNSRegistry", client("APNSWorkerClient"), "APNSTracing", "ServiceClock",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: strictSettings,
            linkerSettings: residentLinkerSettings
        ),
        // The soak's pure parts: its schedule, the slope test of a resource, the ledger of job ends.
        .target(name: "APNSSoak", swiftSettings: strictSettings),
        // Benchmarks for the README (release mode): pure codecs, AMQP, transport, end to end.
        .executableTarget(
            name: "APNSWorkerBench",
            dependencies: [
                "APNSSoak", client("APNSModel"), "APNSBinaryProtocol", "APNSOutcome", "APNSFleet", "APNSProviderToken",
                client("APNSRegistryMessages"), client("APNSTopologyNames"), "SeededRandom", client("AMQPClient"), "APNSTopology",
                "APNSTransport", "APNSSimulator", "APNSConfig", "APNSRegistry", client("APNSWorkerClient"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // Helpers shared by the test targets: broker coordinates, processes, temp dirs, and the
        // in-memory broker behind the client's seams (`InMemoryBroker`), the manual clock (`ManualClock`).
        .target(
            name: "TestSupport",
            dependencies: [client("AMQPClient"), client("CancellableWait"), "ServiceClock", .product(name: "Logging", package: "swift-log")],
            path: "Tests/TestSupport",
            swiftSettings: strictSettings
        ),
        .testTarget(name: "APNSJSONTests", dependencies: [client("APNSJSON"), "SeededRandom"], swiftSettings: strictSettings),
        .testTarget(
            name: "APNSModelTests",
            dependencies: [client("APNSModel"), client("APNSJSON"), "APNSOutcome", "APNSBinaryProtocol", client("APNSRegistryMessages"), "SeededRandom"],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSBinaryProtocolTests",
            dependencies: ["APNSBinaryProtocol", client("APNSModel"), "APNSOutcome", "SeededRandom"],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "APNSFleetTests", dependencies: ["APNSFleet", client("APNSModel"), "APNSAdminQuery"], swiftSettings: strictSettings),
        .testTarget(name: "APNSProviderTokenTests", dependencies: ["APNSProviderToken"], swiftSettings: strictSettings),
        .testTarget(
            name: "APNSRegistryMessagesTests",
            dependencies: [client("APNSRegistryMessages"), "SeededRandom", .product(name: "Crypto", package: "swift-crypto")],
            swiftSettings: strictSettings
        ),
        .testTarget(name: "APNSSoakTests", dependencies: ["APNSSoak"], swiftSettings: strictSettings),
        .testTarget(name: "CancellableWaitTests", dependencies: [client("CancellableWait")], swiftSettings: strictSettings),
        .testTarget(
            name: "APNSWorkerClientTests",
            dependencies: [
                client("APNSWorkerClient"), client("AMQPClient"), client("APNSModel"), client("APNSJSON"), client("APNSRegistryMessages"), client("APNSTopologyNames"),
                "APNSTopology", "TestSupport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSTopologyTests",
            dependencies: [
                "APNSTopology", client("AMQPClient"), client("APNSModel"), client("APNSTopologyNames"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSTracingTests",
            dependencies: [
                "APNSTracing", client("APNSWorkerClient"), "APNSConfig", client("APNSTopologyNames"), "APNSTopology", client("AMQPClient"),
                "APNSSimulator", "TestSupport",
                .product(name: "OTel", package: "swift-otel"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSConfigTests",
            dependencies: [
                "APNSConfig", client("APNSModel"), client("APNSTopologyNames"), "APNSTopology", client("AMQPClient"),
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "AMQPClientTests",
            dependencies: [
                client("AMQPClient"), client("APNSModel"), client("APNSTopologyNames"), "SeededRandom", "APNSTopology", "TestSupport",
                .product(name: "Logging", package: "swift-log"),
                // The worker's service group run `whileConnected` (ConnectionServiceTests).
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSTransportTests",
            dependencies: [
                client("APNSModel"), "APNSBinaryProtocol", "APNSOutcome", "APNSChannelManagement", "APNSTransport", "APNSSimulator", "TestSupport",
                "SeededRandom", "ServiceClock",
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSRegistryTests",
            dependencies: [
                "APNSRegistry", client("APNSModel"), client("APNSJSON"), client("APNSRegistryMessages"), "APNSFleet", client("APNSTopologyNames"),
                "SeededRandom", "APNSConfig", client("AMQPClient"), "APNSTopology", "APNSSimulator", "TestSupport", "QueueConsumer", "ServiceClock",
                "APNSTracing", client("APNSWorkerClient"), "APNSWorker",
                .product(name: "Tracing", package: "swift-distributed-tracing"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "W3CTraceContext", package: "swift-w3c-trace-context"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "QueueConsumerTests",
            // The re-consume against the real broker (ReconsumeBrokerTests).
            dependencies: ["QueueConsumer", "ServiceClock", client("AMQPClient"), "TestSupport", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "ServiceClockTests",
            dependencies: [
                "ServiceClock", "TestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSOperationsTests",
            dependencies: [
                "APNSOperations", client("AMQPClient"), client("APNSModel"), client("APNSTopologyNames"), "APNSTopology", "TestSupport",
                "ServiceClock", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSWorkerTests",
            dependencies: [
                client("APNSModel"), "APNSBinaryProtocol", "APNSOutcome", "APNSFleet", "APNSChannelManagement", client("APNSTopologyNames"), client("AMQPClient"),
                "APNSTopology", "APNSTransport", "APNSSimulator", "APNSWorker", client("CancellableWait"), "TestSupport", "QueueConsumer",
                "APNSConfig", client("APNSWorkerClient"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strictSettings
        ),
        .testTarget(
            name: "APNSAdminTests",
            dependencies: [
                "APNSAdmin", client("APNSModel"), "APNSAdminQuery", "APNSChannelManagement", "APNSFleet",
                client("APNSRegistryMessages"), client("APNSTopologyNames"), "APNSConfig", client("AMQPClient"), "APNSTopology",
                "APNSTransport", "APNSSimulator", "APNSWorker",
                "APNSOperations", "APNSRegistry", "TestSupport",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Logging", package: "swift-log"),
            ],
            exclude: ["Scripts"],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
