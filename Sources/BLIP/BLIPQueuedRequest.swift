internal import NIOConcurrencyHelpers

/// A request queued with ``BLIPConnection/enqueueRequest(_:timeout:progress:)``: it has taken its place in
/// the connection's send order; its reply is awaited later with ``reply()``.
public struct BLIPQueuedRequest: Sendable {
    let outcome: ReplyOutcome
    let pending: BLIPPendingReply

    /// Waits for the reply. Returns or throws what ``BLIPConnection/sendRequest(_:timeout:progress:)``
    /// would: the reply, a ``BLIPError`` for an ERR reply, a ``BLIPConnectionError`` when the connection
    /// failed or closed first or the time ran out, or `CancellationError` after ``cancel()``. Every call
    /// gets the same outcome; cancelling a task waiting here cancels the request, as ``cancel()`` does.
    public func reply() async throws -> BLIPResponse {
        let pending = self.pending
        return try await self.outcome.wait(onCancel: { pending.cancel() }).get()
    }

    /// Gives the reply up, as ``BLIPPendingReply/cancel()`` does: a request not yet started is never sent,
    /// one already started is sent whole and its reply dropped. Does nothing once the request has ended.
    public func cancel() {
        self.pending.cancel()
    }
}

/// The outcome of one request, set once, for any number of waiters.
final class ReplyOutcome: Sendable {
    private enum State {
        case waiting([UInt64: CheckedContinuation<Result<BLIPResponse, any Error>, Never>], nextWaiter: UInt64)
        case ended(Result<BLIPResponse, any Error>)
    }

    private let state = NIOLockedValueBox(State.waiting([:], nextWaiter: 0))

    /// Records the outcome (the first one only) and wakes every waiter, after the lock.
    func end(_ result: Result<BLIPResponse, any Error>) {
        let waiters = self.state.withLockedValue {
            state -> [CheckedContinuation<Result<BLIPResponse, any Error>, Never>] in
            guard case .waiting(let waiters, _) = state else { return [] }
            state = .ended(result)
            return Array(waiters.values)
        }
        for waiter in waiters { waiter.resume(returning: result) }
    }

    /// The outcome, once there is one. `onCancel` runs if the waiting task is cancelled first (the outcome
    /// it leads to then ends the wait).
    func wait(onCancel: @escaping @Sendable () -> Void) async -> Result<BLIPResponse, any Error> {
        if case .ended(let result) = self.state.withLockedValue({ $0 }) { return result }
        let id = self.state.withLockedValue { state -> UInt64 in
            guard case .waiting(let waiters, let next) = state else { return 0 }
            state = .waiting(waiters, nextWaiter: next + 1)
            return next
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = self.state.withLockedValue { state -> Result<BLIPResponse, any Error>? in
                    switch state {
                    case .ended(let result): return result
                    case .waiting(var waiters, let next):
                        waiters[id] = continuation
                        state = .waiting(waiters, nextWaiter: next)
                        return nil
                    }
                }
                if let ended { continuation.resume(returning: ended) }
            }
        } onCancel: {
            onCancel()
        }
    }
}
