import SeededRandom
import Testing

@testable import APNSTransport

/// A model check of the pool's machine: long seeded random runs of events, each configuration,
/// with the rules of `HTTP2PoolStateMachine`'s doc comment checked after every step by
/// `PoolWorld` (no stream past a connection's limit or on one not ready, parked requests in
/// order and each answered by a stream or by its deadline, no loop started twice or past the
/// pool's size or before first use, the window within its bounds, shutdown answering everyone).
/// A failure names its seed, so the run can be replayed.
@Suite struct HTTP2PoolModelTests {
    static let seeds: [UInt64] = Array(1...40)

    @Test(arguments: PoolWorld.Setup.allCases)
    func randomRunsKeepEveryRule(_ setup: PoolWorld.Setup) {
        for seed in Self.seeds {
            var random = SeededGenerator(seed: seed)
            var world = PoolWorld(setup)
            var steps: [PoolWorld.Stimulus] = []
            // Shutdown is rarer than the rest, so most of a run is the pool at work.
            let stimuli = PoolWorld.Stimulus.allCases.filter { $0 != .shutdown }
            for _ in 0..<300 {
                let stimulus = Int.random(in: 0..<100, using: &random) == 0 ? .shutdown : stimuli.randomElement(using: &random)!
                steps.append(stimulus)
                world.apply(stimulus)
                if !world.violations.isEmpty { break }
            }
            world.quiesce()
            HTTP2PoolMachinePairTests.expectAtRest(&world)
            #expect(world.violations.isEmpty, "seed \(seed): \(world.violations.prefix(3)) after \(steps.suffix(12))")
        }
    }

    /// The runs reach what the rules are about, so passing says something.
    @Test func theRunsReachEveryRule() {
        var opened = 0, timedOut = 0, resumed = 0, windows = 0, dormant = 0
        for seed in Self.seeds {
            for setup in PoolWorld.Setup.allCases {
                var random = SeededGenerator(seed: seed)
                var world = PoolWorld(setup)
                let stimuli = PoolWorld.Stimulus.allCases.filter { $0 != .shutdown }
                for _ in 0..<300 {
                    let before = (world.parked.count, world.ended.count, world.streamed.count)
                    world.apply(stimuli.randomElement(using: &random)!)
                    if world.loops.count > world.pool.baseConnections { opened += 1 }
                    if world.ended.count - before.1 > world.streamed.count - before.2 { timedOut += 1 }
                    if world.parked.count < before.0 && world.streamed.count > before.2 { resumed += 1 }
                    if world.pool.dormant { dormant += 1 }
                }
                windows += world.windowChanges
            }
        }
        #expect(opened > 0 && timedOut > 0 && resumed > 0 && windows > 0 && dormant > 0, "\([opened, timedOut, resumed, windows, dormant])")
    }
}
