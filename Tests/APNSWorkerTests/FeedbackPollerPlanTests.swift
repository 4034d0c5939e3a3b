/// Which feedback service pollers a change while running starts, stops and replaces, as pure
/// logic (`FeedbackPollerSpec`, `FeedbackPollerPlan`); the pollers themselves following a reload
/// are tested end to end (`ReloadFollowersEndToEndTests`).
import APNSConfig
import Testing

@testable import APNSWorker

@Suite struct FeedbackPollerPlanTests {
    static func binary(_ id: String, cert: String = "/c.pem", interval: Duration = .seconds(60), port: Int = 2196) -> BundleConfiguration {
        BundleConfiguration(
            bundleID: id, transport: .binary, auth: .certificate(certFile: cert, keyFile: "/c.key"), host: "127.0.0.1",
            feedbackInterval: interval, feedbackPort: port)
    }

    static func specs(_ bundles: [BundleConfiguration], digests: [String: String] = ["/c.pem": "1", "/c.key": "2"]) -> [FeedbackPollerSpec] {
        bundles.compactMap { FeedbackPollerSpec($0, fileDigests: digests) }
    }

    static func running(_ specs: [FeedbackPollerSpec]) -> [String: FeedbackPollerSpec] {
        Dictionary(uniqueKeysWithValues: specs.map { ($0.bundleID, $0) })
    }

    @Test func onlyBinaryBundlesThatPollHaveAPoller() {
        let http2 = BundleConfiguration(bundleID: "com.example.h2", auth: .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: "/k.p8"))
        let off = Self.binary("com.example.off", interval: .zero)
        #expect(Self.specs([http2, off, Self.binary("com.example.on")]).map(\.bundleID) == ["com.example.on"])
    }

    @Test func addedRemovedAndUnchangedBundles() {
        let before = Self.running(Self.specs([Self.binary("a"), Self.binary("b")]))
        var moved = Self.binary("a")
        moved.line = 40  // where the section is in the file is no change
        let plan = FeedbackPollerPlan(running: before, wanted: Self.specs([moved, Self.binary("c")]))
        #expect(plan.started.map(\.bundleID) == ["c"])
        #expect(plan.stopped == ["b"])
        #expect(plan.replaced.isEmpty)
    }

    @Test func aNewCertificateEndpointOrIntervalReplacesThePoller() {
        let before = Self.running(Self.specs([Self.binary("a"), Self.binary("b"), Self.binary("c")]))
        let wanted = Self.specs([Self.binary("a", cert: "/other.pem"), Self.binary("b", port: 3000), Self.binary("c", interval: .seconds(5))])
        let plan = FeedbackPollerPlan(running: before, wanted: wanted)
        #expect(plan.replaced.map(\.bundleID) == ["a", "b", "c"])
        #expect(plan.started.isEmpty && plan.stopped.isEmpty)
    }

    @Test func aCertificateRotatedInPlaceReplacesThePollerAndTheSameBytesDoNot() {
        let before = Self.running(Self.specs([Self.binary("a")]))
        let same = FeedbackPollerPlan(running: before, wanted: Self.specs([Self.binary("a")], digests: ["/c.pem": "1", "/c.key": "2"]))
        #expect(same.isEmpty)
        let rotated = FeedbackPollerPlan(running: before, wanted: Self.specs([Self.binary("a")], digests: ["/c.pem": "9", "/c.key": "2"]))
        #expect(rotated.replaced.map(\.bundleID) == ["a"])
    }
}
