internal import BLIPEngine
internal import NIOConcurrencyHelpers

/// A handler that answers and closes in one step (``BLIPRequestContext/closeAfterReply(code:reason:)``):
/// its reply's frames go out, then the close frame. The close is decided under the lock in the same step
/// that queues the reply, so no reply of another handler is queued after it, and everything still pending
/// fails at once with the close status (the peer's pending requests fail when the close frame reaches it).
///
/// A reply given before its request's last frame arrived (a streaming handler's) is held by the engine
/// until then (LiteCore treats an earlier reply as fatal): the close waits for it to be released.
extension ConnectionStateMachine {
    /// A close asked for after the reply to one request.
    struct CloseAfterReply {
        var reason: BLIPCloseReason
        /// The reply is queued, but the engine holds it until the request's last frame.
        var waitsForHeldReply = false
    }

    /// A handler asked to close once its reply is queued.
    mutating func closeAfterReply(
        to number: UInt64,
        expectsReply: Bool,
        _ reason: BLIPCloseReason,
        effects: inout Effects
    ) {
        guard !self.isClosed else { return }
        if expectsReply && self.engine.awaitsReply(toRequest: number) {
            self.closesAfterReply[number] = CloseAfterReply(reason: reason)
        } else if expectsReply && self.engine.isReplyHeld(toRequest: number) {
            self.closesAfterReply[number] = CloseAfterReply(reason: reason, waitsForHeldReply: true)
        } else {
            self.closeAfterQueuedReplies(reason, effects: &effects)
        }
    }

    /// The reply to request `number` has just been queued (whole, or its last piece) or given up: the close
    /// asked for after it, if any, now or once the engine releases a held reply.
    mutating func closeIfAskedAfterReply(to number: UInt64, effects: inout Effects) {
        guard !self.closesAfterReply.isEmpty, var close = self.closesAfterReply[number] else { return }
        if self.engine.isReplyHeld(toRequest: number) {
            close.waitsForHeldReply = true
            self.closesAfterReply[number] = close
            return
        }
        self.closesAfterReply.removeValue(forKey: number)
        self.closeAfterQueuedReplies(close.reason, effects: &effects)
    }

    /// After a frame was received: closes asked for after replies the engine held, once it has released
    /// them (their request's last frame arrived).
    mutating func closeAfterReleasedReplies(effects: inout Effects) {
        for (number, close) in self.closesAfterReply where close.waitsForHeldReply {
            guard !self.engine.isReplyHeld(toRequest: number) else { continue }
            self.closesAfterReply.removeValue(forKey: number)
            self.closeAfterQueuedReplies(close.reason, effects: &effects)
            return
        }
    }

    /// Closes with `reason` after the replies queued whole so far have been written: everything else pending
    /// fails now with the close status, as for ``close(_:)``.
    fileprivate mutating func closeAfterQueuedReplies(_ reason: BLIPCloseReason, effects: inout Effects) {
        guard !self.isClosed else { return }
        var reason = reason
        reason.finishesQueuedReplies = true
        if self.requestedClose == nil { self.requestedClose = reason }
        self.engine.finishQueuedReplies()
        // Our own replies: no bound on their bytes (after the peer's error, 1 MiB bounds what it can make us
        // write).
        self.finishingReplies = .max
        let status = BLIPCloseStatus(code: reason.code, reason: reason.reason, initiator: .local)
        self.closeLocked(
            status: status,
            error: self.connectionError(for: status),
            effects: &effects,
            finishingReplies: true
        )
        effects.closeTransport = reason
        effects.wakeWriter = true
    }
}
