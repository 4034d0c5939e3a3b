/// One HTTP/2 connection of the pool: its channel, and the queue through which requests from
/// any thread reach its `HTTP2ConnectionHandler` in batches.
import NIOCore
import Synchronization

/// Requests for one connection, handed over from any thread and written on the connection's
/// event loop in batches: every request queued while a batch is on its way rides with it, so a
/// busy connection makes one event-loop hop, one flush, a TLS record per 16 KiB
/// (`WriteGatheringHandler`) and one `write(2)` for many notifications instead of one each (the profile's largest cost was that flush per
/// request). NIO has no such batching for writes coming from outside the event loop.
final class HTTP2Connection: Sendable {
    let channel: any Channel
    private let handler: NIOLoopBound<HTTP2ConnectionHandler>
    private let queued = Mutex<(requests: [StreamRequest], scheduled: Bool)>(([], false))

    init(channel: any Channel, handler: HTTP2ConnectionHandler) {
        self.channel = channel
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
    }

    var isActive: Bool { channel.isActive }

    /// Queues `request`; its `onResult` is called in every case (answer, failure, or
    /// `.notProcessed` when the connection closed before the request was written).
    func send(_ request: StreamRequest) {
        let schedule = queued.withLock { state in
            state.requests.append(request)
            defer { state.scheduled = true }
            return !state.scheduled
        }
        guard schedule else { return }
        channel.eventLoop.execute { self.writeQueued() }
    }

    private func writeQueued() {
        let batch = queued.withLock { state in
            state.scheduled = false
            defer { state.requests.removeAll(keepingCapacity: true) }
            return state.requests
        }
        handler.value.send(batch)
    }
}
