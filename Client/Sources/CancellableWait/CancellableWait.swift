/// CancellableWait: suspending until someone else hands over a value, with task cancellation
/// done right, in one place for every module (the AMQP client's deliveries, the transports'
/// connection pool and first-use gate, the tests' manual clocks). Every such wait has the same two races, and each hand-written copy had to get both:
///
/// - the cancellation handler may run *before* the continuation is registered, finding nothing
///   to cancel; the wait must then notice the cancellation itself, or it hangs;
/// - the waker and the canceller may both find the continuation; only the one that removes it
///   (under the caller's lock) may resume it, so it is resumed exactly once.
///
/// The caller keeps its waiters wherever it likes (a dictionary, a pool state machine) under its
/// own lock, and gives two closures: `register` stores the continuation (or answers at once),
/// `withdraw` removes it if it is still there. Both run under the caller's lock. Neither
/// escapes, and the function is inlinable (specialised where it is called), so a wait costs what
/// the hand-written one did: it sits on the HTTP/2 transport's per-request path.

/// Waits for a value; a cancelled waiter gets `cancelled` (for waits that cannot fail).
@inlinable
public func withCancellableWait<Value: Sendable>(
    register: (CheckedContinuation<Value, Never>) -> Value?,
    withdraw: @Sendable () -> CheckedContinuation<Value, Never>?,
    cancelled: @autoclosure @Sendable () -> Value
) async -> Value {
    await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
            if let immediate = register(continuation) {
                continuation.resume(returning: immediate)
            } else if Task.isCancelled, let registered = withdraw() {
                // Cancelled before the registration: the handler below found nothing to resume.
                registered.resume(returning: cancelled())
            }
        }
    } onCancel: {
        withdraw()?.resume(returning: cancelled())
    }
}

/// Waits for a value or an error; a cancelled waiter gets `cancelled` (by default it throws
/// `CancellationError`). `register` answers at once with a result, or nil to wait.
@inlinable
public func withCancellableWait<Value: Sendable>(
    register: (CheckedContinuation<Value, any Error>) -> Result<Value, any Error>?,
    withdraw: @Sendable () -> CheckedContinuation<Value, any Error>?,
    cancelled: @autoclosure @Sendable () -> Result<Value, any Error> = .failure(CancellationError())
) async throws -> Value {
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Value, any Error>) in
            if let immediate = register(continuation) {
                continuation.resume(with: immediate)
            } else if Task.isCancelled, let registered = withdraw() {
                // Cancelled before the registration: the handler below found nothing to resume.
                registered.resume(with: cancelled())
            }
        }
    } onCancel: {
        withdraw()?.resume(with: cancelled())
    }
}
