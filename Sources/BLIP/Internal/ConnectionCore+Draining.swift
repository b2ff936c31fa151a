internal import BLIPEngine
internal import NIOConcurrencyHelpers
internal import Synchronization

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
                    guard !Task.isCancelled, !state.isClosed, !state.isQuiet() else { return false }
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
        return self.state.withLockedValue { $0.isClosed || $0.isQuiet() }
    }

    /// Resumes the graceful closes waiting, once nothing is in flight (or the connection closed).
    func resumeDrainWaitersIfQuiet() {
        let waiters = self.state.withLockedValue { state -> [WaiterContinuation<Void, Never>] in
            guard !state.drainWaiters.isEmpty else {
                self.drainIsWaiting.store(false, ordering: .relaxed)  // the last one was cancelled
                return []
            }
            guard state.isClosed || state.isQuiet() else { return [] }
            defer { state.drainWaiters.removeAll() }
            self.drainIsWaiting.store(false, ordering: .relaxed)
            return Array(state.drainWaiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }
}
