/// `HTTP2Transport` opening connections as its in-flight window needs them and closing them
/// when idle, against the simulator: a server that allows few streams per
/// connection and answers slowly makes the window want more than one connection carries.
import APNSModel
import APNSSimulator
import APNSTransport
import Foundation
import Testing
import TestSupport

private typealias Env = HTTP2Integration

@Suite("HTTP2Transport's connections opened on demand", .serialized)
struct HTTP2DynamicConnectionsTests {
    @Test func aSecondConnectionOpensWhenTheWindowWantsMoreStreamsAndClosesWhenIdle() async throws {
        try await Env.withTransport(
            simulator: { $0.maxConcurrentStreams = 10 },
            transport: {
                $0.connections = 1
                $0.maxConnections = 3
                $0.inFlightFloor = 60
                $0.inFlightCeiling = 60
                $0.idleConnectionTimeout = .milliseconds(300)
                $0.requestTimeout = .seconds(60)
            }
        ) { simulator, transport in
            simulator.setFaults(SimulatorFaults(latency: .milliseconds(100)))
            #expect(transport.inFlightWindow == 60)
            // 60 wanted in flight, 10 streams a connection: one connection cannot carry them.
            let results = await Env.sendAll((0..<300).map { _ in Env.notification() }, through: transport)
            #expect(results.allSatisfy { $0.isAccepted }, "\(results.filter { !$0.isAccepted }.prefix(3))")
            #expect(simulator.counters().connections >= 2, "a connection was opened for the window")
            // Nothing more to send: the connections opened on demand close; the base one stays,
            // and those closed are reported idle, not down.
            try await waitUntil("the connections opened on demand closed", timeout: .seconds(60)) {
                simulator.counters().openConnections == 1
            }
            try await waitUntil("the closed ones reported idle", timeout: .seconds(60)) {
                let states = transport.connectionStates()
                return states[.ready] == 1 && states[.idle] == 2 && states[.backingOff] == 0
            }
            // Work again: it opens again.
            simulator.setFaults(SimulatorFaults(latency: .milliseconds(100)))
            let again = await Env.sendAll((0..<200).map { _ in Env.notification() }, through: transport)
            #expect(again.allSatisfy { $0.isAccepted })
        }
    }

    /// A pool idle for `poolIdleTimeout` closes its base connection too and reports
    /// `idle` (as before its first job), and its next notification opens it again. Waits for
    /// the states, never for a time.
    @Test func aPoolIdleForItsTimeoutClosesEveryConnectionReportsIdleAndReopensForTheNextJob() async throws {
        try await Env.withTransport(
            simulator: { _ in },
            transport: {
                $0.connections = 1
                $0.idleConnectionTimeout = .milliseconds(200)
                $0.poolIdleTimeout = .milliseconds(400)
            }
        ) { simulator, transport in
            let first = await Env.sendAll((0..<20).map { _ in Env.notification() }, through: transport)
            #expect(first.allSatisfy { $0.isAccepted })
            try await waitUntil("the idle pool closed its connection", timeout: .seconds(60)) {
                simulator.counters().openConnections == 0
            }
            try await waitUntil("the idle pool reported idle, not down", timeout: .seconds(60)) {
                let states = transport.connectionStates()
                return states[.idle] == 1 && states[.ready] == 0 && states[.backingOff] == 0 && states[.connecting] == 0
            }
            let again = await Env.sendAll((0..<20).map { _ in Env.notification() }, through: transport)
            #expect(again.allSatisfy { $0.isAccepted }, "\(again.filter { !$0.isAccepted }.prefix(3))")
            #expect(simulator.counters().connections >= 2, "a new connection for the next job")
        }
    }

    /// The idle checks run on the transport's clock: a pool idle for its timeout closes its
    /// connection when a manual clock passes the idle period, and not before. The period is an
    /// hour, which the system's clock never reaches while the test runs.
    @Test func theIdleCloseComesWhenTheTransportsClockPassesTheIdlePeriodAndNotBefore() async throws {
        let clock = ManualClock()
        let period = Duration.seconds(3600)
        try await Env.withTransport(
            transport: {
                $0.connections = 1
                $0.idleConnectionTimeout = period
                $0.poolIdleTimeout = period
            },
            clock: clock
        ) { simulator, transport in
            try await waitUntil("the idle checks wait on the manual clock") { clock.sleepers == 1 }
            let sent = await Env.sendAll((0..<20).map { _ in Env.notification() }, through: transport)
            #expect(sent.allSatisfy { $0.isAccepted })
            #expect(simulator.counters().openConnections == 1)

            // Half a period: no check is due, the first wait goes on.
            clock.advance(by: period / 2)
            #expect(clock.sleepers == 1, "no idle check before the period passed")
            #expect(transport.connectionStates()[.ready] == 1)

            // The first period passes: the connection carried streams in it, so it stays.
            clock.advance(by: period / 2)
            try await waitUntil("the first idle check ran and the next wait began") { clock.sleepers == 1 }
            #expect(transport.connectionStates()[.ready] == 1, "a connection used in the period is not idle")
            #expect(simulator.counters().openConnections == 1)

            // A whole period without a job: the pool closes its connection and reports idle.
            clock.advance(by: period)
            try await waitUntil("the idle pool closed its connection", timeout: .seconds(60)) {
                simulator.counters().openConnections == 0
            }
            let states = transport.connectionStates()
            #expect(states[.idle] == 1 && states[.ready] == 0, "\(states)")

            let again = await Env.sendAll((0..<5).map { _ in Env.notification() }, through: transport)
            #expect(again.allSatisfy { $0.isAccepted }, "the next job opens it again")
        }
    }

    /// The window's round trip is the path's, from a request's write to its answer: a job that
    /// waited for a connection (here 2 s, while nothing listened) is in flight all that time,
    /// but its wait is not the distance to Apple. Counted, a drain's first answers (after the
    /// connection's set-up and Apple's one stream until the first token) stretched the window's
    /// period to several round trips, and it grew that much later.
    @Test func theWindowsRoundTripLeavesOutTheWaitForAConnection() async throws {
        try await SimulatorTestEnvironment.withOwnEventLoop { group in
            // A port held without a listener: the transport finds nobody there until the job waited.
            let reserved = try ReservedPort()
            defer { reserved.release() }
            let port = reserved.port
            var configuration = Env.configuration(port: port)
            configuration.connections = 1
            configuration.reconnectInitialDelay = .milliseconds(10)
            configuration.requestTimeout = .seconds(60)
            let transport = try HTTP2Transport(configuration: configuration, logger: Env.logger, eventLoopGroup: group)
            let waited: Duration = .seconds(2)
            try await withThrowingTaskGroup(of: Void.self) { running in
                running.addTask { try await transport.run() }
                let sending = Task { await Env.sendAll([Env.notification()], through: transport) }
                try await Task.sleep(for: waited)
                let simulator = try await APNSSimulator.start(
                    SimulatorTestEnvironment.configuration { $0.port = port }, logger: Env.logger, eventLoopGroup: group)
                let results = await sending.value
                running.cancelAll()
                try? await simulator.shutdown()
                #expect(results.allSatisfy { $0.isAccepted }, "\(results)")
            }
            let leastRoundTrip = try #require(transport.leastRoundTrip)
            #expect(leastRoundTrip < UInt64(waited.components.seconds) * 1_000_000_000, "the wait for a connection is not in it")
        }
    }

    @Test func aTransportWithoutAMostKeepsItsConnections() async throws {
        try await Env.withTransport(
            simulator: { $0.maxConcurrentStreams = 10 },
            transport: {
                $0.connections = 1
                $0.inFlightFloor = 60
                $0.inFlightCeiling = 60
            }
        ) { simulator, transport in
            simulator.setFaults(SimulatorFaults(latency: .milliseconds(20)))
            let results = await Env.sendAll((0..<100).map { _ in Env.notification() }, through: transport)
            #expect(results.allSatisfy { $0.isAccepted })
            #expect(simulator.counters().connections == 1, "the operator's connections is the most")
        }
    }
}
