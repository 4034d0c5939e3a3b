/// The loop both transports keep each connection slot in: wait until the transport is first
/// needed, then connect, serve until the connection closes, back off, and again, until graceful
/// shutdown or cancellation. What a connection is, and whether one was useful, is each
/// transport's own; the loop, the backoff and the ways out are shared, and tested once.
import NIOCore
import ServiceLifecycle

struct ReconnectLoop: Sendable {
    var backoff: ReconnectBackoff
    /// Waits between attempts; throws to end the loop. Graceful shutdown cuts it short.
    var sleep: @Sendable (Duration) async throws -> Void = { delay in
        try await cancelWhenGracefulShutdown { try await Task.sleep(for: delay) }
    }

    /// Runs once `gate` opens (at once without one), until shutdown (`isShuttingDown`, graceful shutdown or task
    /// cancellation) ends the loop.
    /// - Parameters:
    ///   - attempt: one connection from connect to close; returns whether it was useful (a useful
    ///     connection is replaced after the backoff's floor, a useless one backs off further).
    ///   - backingOff: called before each wait (a transport reports its slot's state).
    /// - Returns: false when the gate never opened.
    @discardableResult
    func run(
        after gate: FirstUseGate? = nil, isShuttingDown: () -> Bool, backingOff: () -> Void = {}, attempt: () async -> Bool
    ) async -> Bool {
        if let gate {
            guard await gate.waitUntilOpenOrShutdown() else { return false }
        }
        var backoff = self.backoff
        while !isShuttingDown() && !Task.isCancelled {
            let useful = await attempt()
            if isShuttingDown() { break }
            backingOff()
            do {
                try await sleep(backoff.delay(afterUsefulConnection: useful))
            } catch {
                break
            }
        }
        return true
    }

    /// Serves a connected channel until it closes: closes it on task cancellation, and when it is
    /// still not ready (`isReady`) after `readyWithin` (`notReady` says why, first).
    static func serve(
        _ channel: any Channel, readyWithin: Duration, isReady: @escaping @Sendable () -> Bool,
        notReady: @escaping @Sendable () -> Void
    ) async {
        let timeout = channel.eventLoop.scheduleTask(in: readyWithin.timeAmount) {
            if !isReady() {
                notReady()
                channel.close(promise: nil)
            }
        }
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
        timeout.cancel()
    }
}
