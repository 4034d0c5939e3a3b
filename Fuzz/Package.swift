// swift-tools-version: 6.2
import PackageDescription

// libFuzzer targets for the parsers that read bytes from outside: one executable per parser,
// each exporting LLVMFuzzerTestOneInput. SwiftPM links an executable's `main` to
// `<Target>_main`, so each target defines that and starts libFuzzer with LLVMFuzzerRunDriver.
// Built only with the fuzzer sanitizer, which links libFuzzer (scripts/fuzz.sh):
//   swift build --package-path Fuzz -c release -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library
let package = Package(
    name: "apns-worker-fuzz",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "apns-worker", path: ".."),
        // The client's own package, with the pure modules the worker builds on (APNSJSON, APNSModel,
        // APNSRegistryMessages) and AMQPClient.
        .package(path: "../Client"),
    ],
    targets: [
        // The declaration of LLVMFuzzerRunDriver.
        .target(name: "FuzzDriver"),
        .executableTarget(
            name: "FuzzJobParser",
            dependencies: [
                "FuzzDriver", .product(name: "APNSModel", package: "Client"), .product(name: "APNSJSON", package: "Client"),
            ]
        ),
        .executableTarget(
            name: "FuzzBinaryFraming",
            dependencies: ["FuzzDriver", .product(name: "APNSBinaryProtocol", package: "apns-worker")]
        ),
        .executableTarget(
            name: "FuzzFeedbackTuple",
            dependencies: ["FuzzDriver", .product(name: "APNSBinaryProtocol", package: "apns-worker")]
        ),
        .executableTarget(
            name: "FuzzConfig",
            dependencies: ["FuzzDriver", .product(name: "APNSConfig", package: "apns-worker")]
        ),
        .executableTarget(
            name: "FuzzAdminQuery",
            dependencies: ["FuzzDriver", .product(name: "APNSAdminQuery", package: "apns-worker")]
        ),
        // Registration messages (apns.registry), group jobs (apns.groups), fleet messages (apns.fleet).
        .executableTarget(
            name: "FuzzRegistration",
            dependencies: [
                "FuzzDriver", .product(name: "APNSRegistryMessages", package: "Client"), .product(name: "APNSModel", package: "Client"),
            ]
        ),
        .executableTarget(
            name: "FuzzGroupJob",
            dependencies: [
                "FuzzDriver", .product(name: "APNSRegistryMessages", package: "Client"), .product(name: "APNSModel", package: "Client"),
            ]
        ),
        .executableTarget(
            name: "FuzzFleet",
            dependencies: ["FuzzDriver", .product(name: "APNSFleet", package: "apns-worker"), .product(name: "APNSModel", package: "Client")]
        ),
        .executableTarget(
            name: "FuzzAMQPFields",
            dependencies: ["FuzzDriver", .product(name: "AMQPClient", package: "Client")]
        ),
        // The frame sequence of a delivery: body limits and body sizes from the wire.
        .executableTarget(
            name: "FuzzContentAssembler",
            dependencies: ["FuzzDriver", .product(name: "AMQPClient", package: "Client")]
        ),
        // An APNs answer: the apns-id header (parsed by hand) and the JSON body.
        .executableTarget(
            name: "FuzzAPNsAnswer",
            dependencies: ["FuzzDriver", .product(name: "APNSModel", package: "Client")]
        ),
        // The broker host PeerSecurity reads from an AMQP URL, against the AMQP client's reading.
        .executableTarget(
            name: "FuzzPeerHost",
            dependencies: [
                "FuzzDriver", .product(name: "APNSConfig", package: "apns-worker"), .product(name: "AMQPClient", package: "Client"),
            ]
        ),
        // RFC 3339 dates (fleet heartbeats) and the HTTP `Date` header, against Foundation's.
        .executableTarget(
            name: "FuzzRFC3339",
            dependencies: ["FuzzDriver", .product(name: "APNSModel", package: "Client")]
        ),
        .executableTarget(
            name: "FuzzJobEnvelope",
            dependencies: [
                "FuzzDriver", .product(name: "AMQPClient", package: "Client"),
                .product(name: "APNSTopology", package: "apns-worker"),
            ]
        ),
        // The client's readers of events a sync server consumes (contract §4, §7, §8).
        .executableTarget(
            name: "FuzzDeliveryEvent",
            dependencies: [
                "FuzzDriver", .product(name: "APNSWorkerClient", package: "Client"), .product(name: "APNSModel", package: "Client"),
                .product(name: "APNSJSON", package: "Client"),
            ]
        ),
        .executableTarget(
            name: "FuzzFeedbackEvent",
            dependencies: [
                "FuzzDriver", .product(name: "APNSWorkerClient", package: "Client"), .product(name: "APNSModel", package: "Client"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
