internal import BLIPEngine
internal import NIOConcurrencyHelpers

/// A handler that answers and closes in one step (``BLIPRequestContext/closeAfterReply(code:reason:)``):
/// its reply's frames go out, then the close frame. The close is decided under the lock in the same step
/// that queues the reply, so no reply of another handler is queued after it, and everything still pending
/// fails at once with the close status (the peer's pending requests fail when the close frame reaches it).
///
/// A reply given before its request's last frame arrived (a streaming handler's) is held by the engine
/// until then (LiteCore treats an earlier reply as fatal): the close waits for it to be released.
extension ConnectionCore {
    /// A close asked for after the reply to one request.
    struct CloseAfterReply {
        var reason: BLIPCloseReason
        /// The reply is queued, but the engine holds it until the request's last frame.
        var waitsForHeldReply = false
    }

    /// Closes with `reason` once the reply to request `number` is queued; a request that expects no reply
    /// has none to wait for, nor one already answered: the connection closes now (after the replies queued).
    func closeAfterReply(to number: UInt64, expectsReply: Bool, _ reason: BLIPCloseReason) {
        var effects = Effects()
        self.state.withLockedValue { state in
            guard !state.isClosed else { return }
            if expectsReply && state.engine.awaitsReply(toRequest: number) {
                state.closesAfterReply[number] = CloseAfterReply(reason: reason)
            } else if expectsReply && state.engine.isReplyHeld(toRequest: number) {
                state.closesAfterReply[number] = CloseAfterReply(reason: reason, waitsForHeldReply: true)
            } else {
                self.closeAfterQueuedReplies(reason, &state, effects: &effects)
            }
        }
        self.perform(&effects)
    }

    /// The reply to request `number` has just been queued (whole, or its last piece) or given up: the close
    /// asked for after it, if any, now or once the engine releases a held reply.
    func closeIfAskedAfterReply(to number: UInt64, _ state: inout State, effects: inout Effects) {
        guard !state.closesAfterReply.isEmpty, var close = state.closesAfterReply[number] else { return }
        if state.engine.isReplyHeld(toRequest: number) {
            close.waitsForHeldReply = true
            state.closesAfterReply[number] = close
            return
        }
        state.closesAfterReply.removeValue(forKey: number)
        self.closeAfterQueuedReplies(close.reason, &state, effects: &effects)
    }

    /// ``closeIfAskedAfterReply(to:_:effects:)`` outside the lock.
    func closeIfAskedAfterReply(to number: UInt64) {
        var effects = Effects()
        self.state.withLockedValue { self.closeIfAskedAfterReply(to: number, &$0, effects: &effects) }
        self.perform(&effects)
    }

    /// After a frame was received: closes asked for after replies the engine held, once it has released
    /// them (their request's last frame arrived).
    func closeAfterReleasedReplies(_ state: inout State, effects: inout Effects) {
        for (number, close) in state.closesAfterReply where close.waitsForHeldReply {
            guard !state.engine.isReplyHeld(toRequest: number) else { continue }
            state.closesAfterReply.removeValue(forKey: number)
            self.closeAfterQueuedReplies(close.reason, &state, effects: &effects)
            return
        }
    }

    /// Closes with `reason` after the replies queued whole so far have been written: everything else pending
    /// fails now with the close status, as for ``close(_:)``.
    private func closeAfterQueuedReplies(_ reason: BLIPCloseReason, _ state: inout State, effects: inout Effects) {
        guard !state.isClosed else { return }
        var reason = reason
        reason.finishesQueuedReplies = true
        if state.requestedClose == nil { state.requestedClose = reason }
        state.engine.finishQueuedReplies()
        // Our own replies: no bound on their bytes (after the peer's error, 1 MiB bounds what it can make us
        // write).
        state.finishingReplies = .max
        let status = BLIPCloseStatus(code: reason.code, reason: reason.reason, initiator: .local)
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
