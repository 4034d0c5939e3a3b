// swift-tools-version: 6.2
// An example sync server: a package of its own that depends on the client's package (Client/) by
// path and uses its `APNSWorkerClient` product, so its resolution and build show what a sync
// server's do: swift-log and swift-distributed-tracing, nothing of the worker (no Hummingbird,
// PostgresNIO, OTel, Mustache, swift-crypto): `swift package show-dependencies`, `swift build -v`.
import PackageDescription

let package = Package(
    name: "SyncServerExample",
    platforms: [.macOS(.v15)],
    dependencies: [
        // SwiftPM names a path dependency after its directory.
        .package(path: "../../Client"),
    ],
    targets: [
        .executableTarget(
            name: "SyncServerExample",
            dependencies: [.product(name: "APNSWorkerClient", package: "Client")],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
