internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

extension ConnectionStateMachine {
    /// The statistics as of now, with the encoder's and the budget's figures.
    var currentStatistics: BLIPConnectionStatistics {
        var statistics = self.statistics
        let encoder = self.engine.encoderStatistics
        statistics.bytesBeforeCompression = encoder.bytesBeforeCompression
        statistics.bytesAfterCompression = encoder.bytesAfterCompression
        statistics.compressionSkipped = encoder.compressionSkipped
        statistics.sendWindow = self.engine.sendWindowSize
        statistics.bufferedIncomingBytes = self.bufferedBytes()
        return statistics
    }

    /// Outstanding bookkeeping, for tests that check a connection leaves nothing behind: the count of
    /// callers, streams, buffered requests and messages the connection still tracks.
    var pendingBookkeeping: Int {
        self.replyWaiters.count + self.sendWaiters.count + self.demandWaiters.count + self.tokens.count
            + self.tokenOfMessage.count + self.inbound.count + self.streams.count + self.unhandled.count
            + self.pendingWork.count + self.withheld.count + self.engine.outgoingCount
            + self.engine.awaitingReplyCount + self.engine.incomingCount + self.progress.count
            + self.replyProgress.count + self.cancelledTokens.count + self.engine.unansweredCount
            + self.drainWaiters.count + self.order.count + self.closesAfterReply.count
    }

    /// The transport is gone (see `ConnectionCore.transportClosed(_:)`).
    mutating func transportClosed(_ status: BLIPCloseStatus?, effects: inout Effects) {
        let status =
            status
            ?? self.requestedClose.map { BLIPCloseStatus(code: $0.code, reason: $0.reason, initiator: .local) }
            ?? BLIPCloseStatus(code: .normalClosure, initiator: .peer)
        self.closeLocked(status: status, error: self.connectionError(for: status), effects: &effects)
        self.finishingReplies = 0
        _ = self.engine.close()
    }

    /// Fails everything pending with `error` and ends the handler stream. Idempotent. With
    /// `finishingReplies`, the engine is kept so that replies already queued can still be written.
    mutating func closeLocked(
        status: BLIPCloseStatus,
        error: BLIPConnectionError,
        effects: inout Effects,
        finishingReplies: Bool = false
    ) {
        guard !self.isClosed else { return }
        let error = {
            var error = error
            error.closeStatus = status
            return error
        }()
        self.closeError = error
        self.closeStatus = status
        if !finishingReplies { _ = self.engine.close() }
        self.log(.debug, "connection closed", ["blip.reason": "\(error)"], effects: &effects)
        var failed = self.replyWaiters.count
        for case .reply(_, let waiter) in self.inbound.values {
            Self.fail(waiter, error, effects: &effects)
            failed += 1
        }
        for waiter in self.replyWaiters.values { Self.fail(waiter, error, effects: &effects) }
        for waiter in self.sendWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for waiter in self.demandWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for id in self.streams.keys { self.failStream(id, error, effects: &effects) }
        self.progressFailedAll(effects: &effects)
        if let waiter = self.unhandledWaiter { effects.later { waiter.resume(returning: nil) } }
        for waiter in self.closeWaiters { effects.later { waiter.resume(returning: status) } }
        for waiter in self.drainWaiters.values { effects.later { waiter.resume() } }
        for idleTask in self.idleHandlerTasks { effects.later { idleTask.resume(returning: nil) } }
        self.idleHandlerTasks.removeAll()
        // Unanswered requests answer themselves when they go, and a request for a handler that will not
        // run holds a body stream: both call back into the connection, so they go after the lock.
        // Moved out whole (no copy: converting an empty Deque writes to the runtime's shared empty-array
        // storage, which ThreadSanitizer reports as a race between two connections closing at once).
        if !self.unhandled.isEmpty { effects.released.append(self.unhandled) }
        if !self.pendingWork.isEmpty { effects.released.append(self.pendingWork) }
        if !self.order.isEmpty { effects.released.append(self.order.removeAll()) }
        self.replyWaiters.removeAll()
        self.sendWaiters.removeAll()
        self.demandWaiters.removeAll()
        self.inbound.removeAll()
        self.unhandled.removeAll()
        self.pendingWork.removeAll()
        self.unhandledWaiter = nil
        self.closeWaiters.removeAll()
        self.drainWaiters.removeAll()
        self.closesAfterReply.removeAll()
        self.tokens.removeAll()
        self.tokenOfMessage.removeAll()
        self.withheld.removeAll()
        self.exempt = nil
        if let shared = self.configuration.sharedBudget {
            shared.subtract(self.buffered)
            shared.connectionClosed()
            let id = ObjectIdentifier(self.owner)
            shared.stopWaiting(id)
            let wasExempt = self.isExemptFromSharedBudget
            self.isExemptFromSharedBudget = false
            effects.later {
                if wasExempt { shared.endExemption(id) }
                shared.wakeIfRoom()
            }
        }
        self.buffered = 0
        self.assembling = 0
        effects.counts.failedRequests += failed
        effects.finishJobs = true
    }

    static func fail(_ waiter: ReplyWaiter, _ error: any Error, effects: inout Effects) {
        switch waiter {
        case .whole(let continuation): effects.later { continuation.resume(throwing: error) }
        case .streamed(let continuation): effects.later { continuation.resume(throwing: error) }
        case .callback(let handler): effects.later { handler(.failure(error)) }
        }
    }

    /// What pending requests fail with when the connection ends with `status`.
    func connectionError(for status: BLIPCloseStatus) -> BLIPConnectionError {
        if let underlying = status.underlying { return self.connectionError(from: underlying) }
        let reason = status.reason.isEmpty ? "" : ": \(status.reason)"
        switch status.initiator {
        case .peer:
            return BLIPConnectionError(closedByPeerWith: status.code, reason: status.reason)
                ?? BLIPConnectionError(.connectionClosed, "the peer closed the connection (\(status.code)\(reason))")
        case .local:
            return BLIPConnectionError(.connectionClosed, "the connection was closed (\(status.code)\(reason))")
        case .transport:
            return BLIPConnectionError(.transportFailed, "the connection was lost\(reason)")
        }
    }

    func connectionError(from error: any Error) -> BLIPConnectionError {
        if let error = error as? BLIPConnectionError { return error }
        if let error = error as? BLIPEngineError { return self.connectionError(from: error) }
        return BLIPConnectionError(.transportFailed, "\(error)", underlying: error)
    }

    func connectionError(from error: BLIPEngineError) -> BLIPConnectionError {
        switch error.code {
        case .protocolViolation: BLIPConnectionError(.protocolViolation, error.message, underlying: error)
        case .tooManyMessagesInFlight: BLIPConnectionError(.limitExceeded, error.message, underlying: error)
        case .closed: BLIPConnectionError(.connectionClosed, error.message, underlying: error)
        case .messageTooLarge: BLIPConnectionError(.messageTooLarge, error.message, underlying: error)
        case .invalidMessage, .unknownMessage, .noReplyExpected:
            BLIPConnectionError(.invalidMessage, error.message, underlying: error)
        case .bodyFailedMidMessage: BLIPConnectionError(.transportFailed, error.message, underlying: error)
        }
    }

    /// The close code for a fatal engine error: the peer's fault (1002 malformed or out of protocol, 1008
    /// over a limit, 1009 too large) or ours (1011).
    static func closeCode(for error: BLIPEngineError) -> BLIPCloseCode {
        switch error.code {
        case .protocolViolation: .protocolError
        case .tooManyMessagesInFlight: .policyViolation
        case .messageTooLarge: .messageTooBig
        case .closed, .invalidMessage, .unknownMessage, .noReplyExpected, .bodyFailedMidMessage: .internalError
        }
    }

    /// A fatal error in the engine: fail everything and close with the code that says who was wrong.
    /// After the peer's error (`byPeer`), replies already queued whole are still written first, up to
    /// 1 MiB: answers to its earlier, valid requests.
    mutating func fatal(_ error: BLIPEngineError, byPeer: Bool, effects: inout Effects) {
        self.fatal(
            self.connectionError(from: error),
            closeCode: Self.closeCode(for: error),
            byPeer: byPeer,
            effects: &effects
        )
    }

    mutating func fatal(
        _ error: BLIPConnectionError,
        closeCode: BLIPCloseCode,
        byPeer: Bool,
        effects: inout Effects
    ) {
        guard !self.isClosed else { return }
        self.log(
            byPeer ? .error : .critical,
            byPeer ? "the peer broke the protocol" : "connection failed",
            ["blip.error": "\(error)"],
            effects: &effects
        )
        if byPeer {
            effects.counts.protocolErrors += 1
            self.engine.finishRepliesAfterFailure()
            self.finishingReplies = 1 << 20
            effects.wakeWriter = true
        }
        var reason = BLIPCloseReason(closeCode, String(error.message.prefix(120)))
        self.closeLocked(
            status: BLIPCloseStatus(code: closeCode, reason: reason.reason, initiator: .local, underlying: error),
            error: error,
            effects: &effects,
            finishingReplies: byPeer
        )
        reason.finishesQueuedReplies = byPeer
        effects.closeTransport = reason
    }
}
