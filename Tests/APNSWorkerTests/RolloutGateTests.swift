import Testing

@testable import APNSWorker

@Suite struct RolloutGateTests {
    @Test func openRuleLetsEverythingThrough() {
        #expect(RolloutRule.open.decide(syncServer: "sync1.example.com") == .pass)
        #expect(RolloutRule.open.decide(syncServer: nil) == .pass)
    }

    @Test func denyWinsOverAllow() {
        let rule = RolloutRule(allow: ["a", "b"], deny: ["b"])
        #expect(rule.decide(syncServer: "a") == .pass)
        if case .gated(let why) = rule.decide(syncServer: "b") { #expect(why.contains("denied")) } else { Issue.record("b must be gated") }
        if case .gated(let why) = rule.decide(syncServer: "c") { #expect(why.contains("allow list")) } else { Issue.record("c must be gated") }
    }

    @Test func unnamedJobsFollowTheirSetting() {
        #expect(RolloutRule(allowUnnamed: false).decide(syncServer: nil) == .gated(why: "job names no sync server"))
        #expect(RolloutRule(allowUnnamed: false).decide(syncServer: "") == .gated(why: "job names no sync server"))
    }

    @Test func percentageIsStableAndRoughlyProportional() {
        let rule = RolloutRule(percentage: 30)
        let servers = (0..<2000).map { "sync\($0).omnigroup.com" }
        let passed = servers.filter { rule.decide(syncServer: $0) == .pass }
        #expect((500...700).contains(passed.count), "30% of 2000 should be near 600, got \(passed.count)")
        // Same decision every time, and a wider rollout keeps everyone already in.
        #expect(passed == servers.filter { rule.decide(syncServer: $0) == .pass })
        let wider = RolloutRule(percentage: 60)
        #expect(passed.allSatisfy { wider.decide(syncServer: $0) == .pass })
        #expect(RolloutRule(percentage: 0).decide(syncServer: "x") != .pass)
    }

    @Test func bucketIsFNV1a() {
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c; mod 100 = 12638187200555641996 % 100 = 96.
        #expect(RolloutRule.bucket(of: "a") == 96)
    }
}
