// swift-tools-version: 6.2
// An example sync server: a package of its own that depends on apns-worker by path and uses only
// its `APNSWorkerClient` product, so its build shows what a sync server builds (no Hummingbird,
// PostgresNIO, OTel or Mustache): `swift package show-dependencies`, `swift build -v`.
import Foundation
import PackageDescription

// SwiftPM names a path dependency after its directory (apns-worker, or a worktree's name).
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..").standardizedFileURL
let rootIdentity = root.lastPathComponent.lowercased()

let package = Package(
    name: "SyncServerExample",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: "../.."),
    ],
    targets: [
        .executableTarget(
            name: "SyncServerExample",
            dependencies: [.product(name: "APNSWorkerClient", package: rootIdentity)],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
