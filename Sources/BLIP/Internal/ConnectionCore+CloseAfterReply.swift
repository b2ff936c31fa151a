internal import BLIPEngine
internal import NIOConcurrencyHelpers

/// A handler that answers and closes in one step (``BLIPRequestContext/closeAfterReply(code:reason:)``):
/// its reply's frames go out, then the close frame. The close is decided under the lock in the same step
/// that queues the reply, so no reply of another handler is queued after it, and everything still pending
/// fails at once with the close status (the peer's pending requests fail when the close frame reaches it).
extension ConnectionCore {
    /// Closes with `reason` once the reply to request `number` is queued; a request that expects no reply
    /// has none to wait for: the connection closes now.
    func closeAfterReply(to number: UInt64, expectsReply: Bool, _ reason: BLIPCloseReason) {
        var effects = Effects()
        self.state.withLockedValue { state in
            guard !state.isClosed else { return }
            if expectsReply {
                state.closesAfterReply[number] = reason
            } else {
                self.closeAfterQueuedReplies(reason, &state, effects: &effects)
            }
        }
        self.perform(&effects)
    }

    /// The reply to request `number` has just been queued (whole): the close asked for after it, if any.
    func closeIfAskedAfterReply(to number: UInt64, _ state: inout State, effects: inout Effects) {
        guard !state.closesAfterReply.isEmpty, let reason = state.closesAfterReply.removeValue(forKey: number) else {
            return
        }
        self.closeAfterQueuedReplies(reason, &state, effects: &effects)
    }

    /// ``closeIfAskedAfterReply(to:_:effects:)`` for a streamed reply whose last piece was just queued.
    func closeIfAskedAfterReply(to number: UInt64) {
        var effects = Effects()
        self.state.withLockedValue { self.closeIfAskedAfterReply(to: number, &$0, effects: &effects) }
        self.perform(&effects)
    }

    /// Closes with `reason` after the replies queued whole so far have been written: everything else pending
    /// fails now with the close status, as for ``close(_:)``.
    private func closeAfterQueuedReplies(_ reason: BLIPCloseReason, _ state: inout State, effects: inout Effects) {
        var reason = reason
        reason.finishesQueuedReplies = true
        if state.requestedClose == nil { state.requestedClose = reason }
        state.engine.finishQueuedReplies()
        // Our own replies: no bound on their bytes (after the peer's error, 1 MiB bounds what it can make us
        // write).
        state.finishingReplies = .max
        let status = BLIPCloseStatus(code: reason.code, reason: reason.message, initiator: .local)
        self.closeLocked(
            &state,
            status: status,
            error: self.connectionError(for: status),
            effects: &effects,
            finishingReplies: true
        )
        effects.closeTransport = reason
        effects.wakeWriter = true
    }
}
