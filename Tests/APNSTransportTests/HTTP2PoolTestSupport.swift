/// Plain-value helpers for driving `HTTP2PoolStateMachine` in tests: connections are names,
/// parked requests are names, and an action's parts are read back as lists.
@testable import APNSTransport

typealias TestPool = HTTP2PoolStateMachine<String, String>

extension HTTP2PoolStateMachine {
    /// A request for a stream as the transport makes it: a lease now, or parked until `deadline`.
    mutating func acquire(_ waiter: Waiter, deadline: UInt64 = .max) -> (lease: Lease?, action: Action) {
        let asked = requestStream()
        switch asked.request {
        case .lease(let lease): return (lease, asked)
        case .park:
            let parked = park(waiter, deadline: deadline)
            if case .lease(let lease) = parked.request { return (lease, parked) }
            return (nil, parked)
        default: return (nil, asked)
        }
    }
}

extension HTTP2PoolStateMachine where Connection == String {
    /// Connects `slot` (connection "c<slot>") and lets the server's SETTINGS arrive.
    mutating func ready(_ slot: Int, serverLimit: Int? = 100) {
        let g = connecting(slot: slot)
        _ = connected(slot: slot, generation: g, connection: "c\(slot)")
        _ = settings(slot: slot, generation: g, maxConcurrentStreams: serverLimit)
    }
}

extension HTTP2PoolStateMachine.Action {
    /// The parked requests given streams, in order.
    var resumed: [Waiter] { if case .resume(let granted) = request { granted.map(\.0) } else { [] } }
    var resumedLeases: [HTTP2PoolStateMachine.Lease] { if case .resume(let granted) = request { granted.map(\.1) } else { [] } }
    /// The parked requests given none.
    var failed: [Waiter] { if case .fail(let waiters, _) = request { waiters } else { [] } }
    var closes: [Connection] { if case .close(let connections) = connection { connections } else { [] } }
    var opens: [Int] { if case .open(let slots) = connection { slots } else { [] } }
    var parks: Bool { if case .park = request { true } else { false } }
    var refused: Bool { if case .refuse = request { true } else { false } }
}
