internal import NIOConcurrencyHelpers
internal import NIOCore

/// A request's deadline: calls the `expire` given to ``start(_:on:expire:)`` once, when its time has run out,
/// unless ``stop()`` came first.
///
/// On a connection with an event loop (a WebSocket) it is a task scheduled there: a timed request costs a
/// heap entry, not a Swift task and a task group. Elsewhere (the in-memory transport) it is a task that
/// sleeps. Either way it is stopped as soon as the request ends, so that it holds nothing for long.
final class RequestTimer: Sendable {
    private struct State {
        var stopped = false
        var fired = false
        /// `expire` is running (outside the lock).
        var firing = false
        var pending: Pending?
        /// A caller of ``stopAndWait()`` waiting for `expire` to return.
        var stopper: CheckedContinuation<Void, Never>?
    }

    private enum Pending: @unchecked Sendable {
        case scheduled(Scheduled<Void>)
        case task(Task<Void, Never>)

        func cancel() {
            switch self {
            case .scheduled(let scheduled): scheduled.cancel()
            case .task(let task): task.cancel()
            }
        }
    }

    private let state = NIOLockedValueBox(State())

    /// Starts counting `timeout`, on `eventLoop` if there is one. A timer stopped already does not start.
    func start(_ timeout: Duration, on eventLoop: (any EventLoop)?, expire: @escaping @Sendable () -> Void) {
        let pending: Pending
        if let eventLoop {
            pending = .scheduled(eventLoop.scheduleTask(in: Self.timeAmount(timeout)) { self.fire(expire) })
        } else {
            pending = .task(
                Task {
                    guard (try? await Task.sleep(for: timeout)) != nil else { return }
                    self.fire(expire)
                }
            )
        }
        let stoppedAlready = self.state.withLockedValue { state in
            if !state.stopped { state.pending = pending }
            return state.stopped
        }
        if stoppedAlready { pending.cancel() }
    }

    /// The request has ended: the timer will not fire (if it has not yet).
    func stop() {
        let pending = self.state.withLockedValue { state -> Pending? in
            state.stopped = true
            return state.pending.take()
        }
        pending?.cancel()
    }

    /// ``stop()``, then waits for an `expire` that is running to return; returns whether the time ran out.
    /// What `expire` did is then all done: the caller may clear what it left behind.
    func stopAndWait() async -> Bool {
        let (pending, isFiring) = self.state.withLockedValue { state -> (Pending?, Bool) in
            state.stopped = true
            return (state.pending.take(), state.firing)
        }
        pending?.cancel()
        if isFiring {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let returned = self.state.withLockedValue { state -> Bool in
                    guard state.firing else { return true }
                    state.stopper = continuation
                    return false
                }
                if returned { continuation.resume() }
            }
        }
        return self.state.withLockedValue { $0.fired }
    }

    private func fire(_ expire: @Sendable () -> Void) {
        let fires = self.state.withLockedValue { state -> Bool in
            guard !state.stopped, !state.fired else { return false }
            state.fired = true
            state.firing = true
            return true
        }
        guard fires else { return }
        expire()
        let stopper = self.state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            state.firing = false
            state.pending = nil
            return state.stopper.take()
        }
        stopper?.resume()
    }

    /// `duration` for NIO, at most about 292 years.
    static func timeAmount(_ duration: Duration) -> TimeAmount {
        let (seconds, attoseconds) = duration.components
        guard seconds < Int64.max / 1_000_000_000 else { return .nanoseconds(.max) }
        return .nanoseconds(max(0, seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
    }
}
