internal import BLIPEngine

extension ConnectionStateMachine {
    /// A request whose caller is called back with its reply (`onReply`).
    mutating func enqueueCallingBack(
        _ message: BLIPOutgoingMessage,
        progress: ProgressReporter?,
        onReply: @escaping BLIPReplyHandler,
        effects: inout Effects
    ) -> BLIPOutgoingID? {
        let id: BLIPOutgoingID
        switch self.enqueue(message, token: nil, progress: progress, effects: &effects) {
        case .success(let queued): id = queued
        case .failure(let error):
            effects.later { onReply(.failure(error)) }
            return nil
        }
        self.replyWaiters[id] = .callback(onReply)
        // Reading may have paused while nothing waited for the peer: now something does.
        if self.readingPaused { self.updateReading(effects: &effects) }
        return id
    }

    /// A callback's request is given up: it fails with `error`, unless its reply has begun.
    mutating func replyAbandoned(_ id: BLIPOutgoingID, error: any Error, effects: inout Effects) {
        guard let waiter = self.replyWaiters.removeValue(forKey: id) else { return }
        self.progressFailed(request: id, effects: &effects)
        ConnectionStateMachine.fail(waiter, error, effects: &effects)
        self.abandonOutgoing(id, effects: &effects)
    }
}
