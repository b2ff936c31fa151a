internal import NIOConcurrencyHelpers

extension ConnectionCore {
    /// Queues a request whose reply, or failure, goes to `onReply` after the lock; returns the token that
    /// cancels it. A request that cannot be queued (the connection has closed, its properties cannot be
    /// encoded) fails before this returns.
    func sendRequest(
        _ request: BLIPRequest,
        progress: ProgressReporter?,
        onReply: @escaping BLIPReplyHandler
    ) -> UInt64 {
        let token = self.makeToken()
        let message = self.outgoing(request, body: .buffer(request.body))
        var effects = Effects()
        self.state.withLockedValue { state in
            guard
                let id = self.enqueue(
                    message,
                    token: token,
                    progress: progress,
                    &state,
                    effects: &effects,
                    onError: { onReply(.failure($0)) }
                )
            else { return }
            state.replyWaiters[id] = .callback(onReply)
            // Reading may have paused while nothing waited for the peer: now something does.
            if state.readingPaused { self.updateReading(&state, effects: &effects) }
        }
        self.perform(effects)
        return token
    }
}

/// The timer of one ``BLIPConnection/sendRequest(_:timeout:progress:onReply:)``: a task that sleeps for the
/// timeout, cancelled as soon as the reply (or failure) comes, so that it holds nothing for long.
final class ReplyTimer: Sendable {
    private let state = NIOLockedValueBox<(ended: Bool, task: Task<Void, Never>?)>((false, nil))

    /// Calls `expire` after `timeout`, unless ``ended()`` comes first.
    func start(_ timeout: Duration, expire: @escaping @Sendable () -> Void) {
        let task = Task {
            guard (try? await Task.sleep(for: timeout)) != nil else { return }
            expire()
        }
        let endedAlready = self.state.withLockedValue { state in
            if !state.ended { state.task = task }
            return state.ended
        }
        if endedAlready { task.cancel() }
    }

    /// The request has ended: the timer stops.
    func ended() {
        let task = self.state.withLockedValue { state in
            state.ended = true
            defer { state.task = nil }
            return state.task
        }
        task?.cancel()
    }
}
