internal import BLIPEngine
internal import NIOConcurrencyHelpers
internal import Synchronization

/// A graceful close: nothing new starts (requests that expect a reply get ERR BLIP/503), what is in flight
/// finishes, up to a deadline; then the connection closes.
///
/// In flight means: a message of ours queued or being sent (requests, replies, streamed bodies), a request
/// of ours waiting for its reply, a message from the peer still arriving, a handler running or waiting for
/// a slot, and a request of the peer's handed to the application and not yet answered. Every operation that
/// can end one of these ends in ``perform(_:)``, which then checks (only while a graceful close waits).
extension ConnectionCore {
    /// Starts draining and waits until nothing is in flight, the connection closes, `timeout` passes, or the
    /// task is cancelled, whichever comes first. Returns whether it ended with nothing in flight.
    func drain(timeout: Duration) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask { await self.quiet() }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    /// Waits until nothing is in flight or the connection closed (true), or the task is cancelled (false).
    private func quiet() async -> Bool {
        let token = self.makeToken()
        await withTaskCancellationHandler {
            await self.handOffThatCannotFail { (continuation: WaiterContinuation<Void, Never>) in
                let waits = self.state.withLockedValue { state -> Bool in
                    state.isDraining = true
                    guard !Task.isCancelled, !state.isClosed, !Self.isQuiet(state) else { return false }
                    state.drainWaiters[token] = continuation
                    self.drainIsWaiting.store(true, ordering: .relaxed)
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            let waiter = self.state.withLockedValue { $0.drainWaiters.removeValue(forKey: token) }
            waiter?.resume()
        }
        return self.state.withLockedValue { $0.isClosed || Self.isQuiet($0) }
    }

    /// Resumes the graceful closes waiting, once nothing is in flight (or the connection closed).
    func resumeDrainWaitersIfQuiet() {
        let waiters = self.state.withLockedValue { state -> [WaiterContinuation<Void, Never>] in
            guard !state.drainWaiters.isEmpty else {
                self.drainIsWaiting.store(false, ordering: .relaxed)  // the last one was cancelled
                return []
            }
            guard state.isClosed || Self.isQuiet(state) else { return [] }
            defer { state.drainWaiters.removeAll() }
            self.drainIsWaiting.store(false, ordering: .relaxed)
            return Array(state.drainWaiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Nothing in flight either way, no handler running or waiting, and no request of the peer's that owes
    /// a reply (the engine counts those from their first frame until their reply is queued, including the
    /// ones handed to the application as ``BLIPIncomingRequest``).
    static func isQuiet(_ state: State) -> Bool {
        state.engine.outgoingCount == 0 && state.engine.awaitingReplyCount == 0 && state.engine.incomingCount == 0
            && state.runningHandlers == 0 && state.pendingWork.isEmpty && state.order.isEmpty
            && state.engine.unansweredCount == 0
    }
}
