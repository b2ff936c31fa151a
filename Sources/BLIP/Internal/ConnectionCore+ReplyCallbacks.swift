internal import BLIPEngine

extension ConnectionCore {
    /// Queues a request whose reply, or failure, goes to `onReply` after the lock; returns its handle, or
    /// nil when it could not be queued (the connection has closed, its properties cannot be encoded): it
    /// has failed then, before this returns. No token: the handle exists only once the request is queued,
    /// so a cancellation never comes before it (``cancelReply(to:with:)``).
    func sendRequest(
        _ request: BLIPRequest,
        progress: ProgressReporter?,
        onReply: @escaping BLIPReplyHandler
    ) -> BLIPOutgoingID? {
        let message = self.outgoing(request, body: .buffer(request.body))
        var effects = Effects()
        let id = self.state.withLockedValue {
            $0.enqueueCallingBack(message, progress: progress, onReply: onReply, effects: &effects)
        }
        self.perform(&effects)
        return id
    }

    /// A callback's request is given up (cancelled, or its time ran out): as ``cancel(token:)`` does for
    /// an awaiting caller, with `error`. Nothing happens once its reply has begun to arrive or it has
    /// ended: its waiter is gone from the table then.
    func cancelReply(to id: BLIPOutgoingID, with error: any Error) {
        var effects = Effects()
        self.state.withLockedValue { $0.replyAbandoned(id, error: error, effects: &effects) }
        self.perform(&effects)
    }
}
