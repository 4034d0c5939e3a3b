// swift-tools-version: 6.2
import PackageDescription

// The sync server's client (APNSWorkerClient) and the modules it is built from, in a package of
// their own: SwiftPM resolves and fetches every dependency a package names, whatever product a
// dependent uses, so a sync server that depends on this package fetches swift-log and
// swift-distributed-tracing and nothing of the server
// (docs/decisions.md, "The client's own package"). The worker's package, in the directory above,
// depends on this one by path and uses its products; the tests of these modules live there.
// scripts/check-example.sh fails if a sync server's resolution fetches anything else.

// Every target builds in Swift 6 language mode with strict concurrency, as the worker's.
let strictSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "apns-worker-client",
    platforms: [.macOS(.v15)],
    products: [
        // For the sync server: typed messages validated by the worker's parsers, confirmed publishes.
        .library(name: "APNSWorkerClient", targets: ["APNSWorkerClient"]),
        // The modules below, for the worker's package (and its fuzz targets) to build on.
        .library(name: "AMQPClient", targets: ["AMQPClient"]),
        .library(name: "APNSJSON", targets: ["APNSJSON"]),
        .library(name: "APNSModel", targets: ["APNSModel"]),
        .library(name: "APNSRegistryMessages", targets: ["APNSRegistryMessages"]),
        .library(name: "APNSTopologyNames", targets: ["APNSTopologyNames"]),
        .library(name: "CancellableWait", targets: ["CancellableWait"]),
        .library(name: "AMQPURLSyntax", targets: ["AMQPURLSyntax"]),
        // For `amqp-c-loop`, the worker's plain-C librabbitmq baseline.
        .library(name: "CRabbitMQ", targets: ["CRabbitMQ"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        // librabbitmq 0.11 from Debian's librabbitmq-dev.
        .systemLibrary(
            name: "CRabbitMQ",
            pkgConfig: "librabbitmq",
            providers: [.apt(["librabbitmq-dev"])]
        ),
        // C shims for the parts of librabbitmq Swift cannot call (variadic functions, macros).
        // Links OpenSSL (librabbitmq's own TLS library) to hand it CA certificates read once.
        .target(
            name: "CRabbitMQShim", dependencies: ["CRabbitMQ"],
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),

        // The pure modules: no IO, no clock read directly, tested without a network. Dependencies
        // point one way: APNSJSON ← APNSModel ← the others (docs/architecture.md, "Modules").
        // The strict JSON reader of job bodies (values, the payload skim) and the flat JSON writer.
        .target(name: "APNSJSON", swiftSettings: strictSettings),
        // The job model and the APNs protocol as values: jobs and their parser, notifications,
        // HTTP/2 requests and answers, transport results, retry policy, untrusted-text rules.
        .target(name: "APNSModel", dependencies: ["APNSJSON"], swiftSettings: strictSettings),
        // What the sync server sends the registry (contract §6): registration changes and group jobs.
        // No swift-crypto: its two digests are its own (`NameDigest`), so the client builds none.
        .target(name: "APNSRegistryMessages", dependencies: ["APNSJSON", "APNSModel"], swiftSettings: strictSettings),
        // Every broker name the worker and its clients use (contract §1, §5, §6) and the job headers.
        .target(name: "APNSTopologyNames", dependencies: ["APNSModel"], swiftSettings: strictSettings),
        // The one reader of AMQP URLs: the AMQP client's and the configuration check's (a leaf:
        // the standard library only).
        .target(name: "AMQPURLSyntax", swiftSettings: strictSettings),
        // Waiting for a value handed over by someone else, with task cancellation done right:
        // the one helper for every such wait (a leaf: the standard library only).
        .target(name: "CancellableWait", swiftSettings: strictSettings),
        // AMQP 0-9-1 client over librabbitmq: one owner thread per connection, async API; a
        // connection lives from `connect` to `close()`. A general client: it knows nothing of APNs.
        .target(
            name: "AMQPClient",
            dependencies: [
                "CRabbitMQ", "CRabbitMQShim", "CancellableWait", "AMQPURLSyntax",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictSettings
        ),
        // The sync server's client library: AMQP and the core only.
        .target(
            name: "APNSWorkerClient",
            dependencies: [
                "AMQPClient", "APNSJSON", "APNSModel", "APNSRegistryMessages", "APNSTopologyNames", .product(name: "Logging", package: "swift-log"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ],
            swiftSettings: strictSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)
