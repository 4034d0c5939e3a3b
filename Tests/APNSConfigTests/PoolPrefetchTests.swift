import APNSConfig
import APNSModel
import Testing

/// Bundles sharing a pool split its streams between their consumers.
@Suite struct PoolPrefetchTests {
    static func member(_ id: String, team: String = "TEAM1", transport: APNSTransportKind = .http2, connections: Int = 2) -> PoolPrefetch.Member {
        let credential: TransportPoolKey.Credential =
            transport == .binary ? .binary(bundleID: id, digest: "d") : .token(teamID: team, keyID: "KEY1", keyDigest: "d")
        let key = TransportPoolKey(host: "api.push.apple.com", port: 443, trustDigest: nil, environment: .production, credential: credential)
        return PoolPrefetch.Member(bundleID: id, key: key, connections: connections)
    }

    @Test func aThousandBundlesOfOneTeamSplitTheirPoolsStreams() {
        let members = (0..<1000).map { Self.member("com.b\($0)") }
        let prefetch = PoolPrefetch.prefetches(members, share: 32, streamsPerConnection: 1000)
        #expect(prefetch.count == 1000)
        #expect(prefetch.values.allSatisfy { $0 == 2 }, "2 connections × 1,000 streams over 1,000 bundles")
        #expect(prefetch.values.reduce(0, +) <= 2000)
    }

    @Test func fewBundlesKeepTheirBudgetShare() {
        let members = (0..<40).map { Self.member("com.b\($0)") }
        let prefetch = PoolPrefetch.prefetches(members, share: 50, streamsPerConnection: 1000)
        #expect(prefetch.values.allSatisfy { $0 == 50 }, "40 × 50 = 2,000 fits 2 × 1,000 streams")
    }

    @Test func aTeamEachKeepsItsShareAndBinaryPoolsAreLeftAlone() {
        let members = (0..<1000).map { Self.member("com.b\($0)", team: "T\($0)") } + [Self.member("com.legacy", transport: .binary, connections: 1)]
        let prefetch = PoolPrefetch.prefetches(members, share: 32, streamsPerConnection: 1000)
        #expect(prefetch.values.allSatisfy { $0 == 32 })
        #expect(prefetch["com.legacy"] == 32)
    }

    @Test func neverLessThanOne() {
        let members = (0..<5000).map { Self.member("com.b\($0)", connections: 1) }
        #expect(PoolPrefetch.prefetches(members, share: 32, streamsPerConnection: 1000).values.allSatisfy { $0 == 1 })
    }
}
