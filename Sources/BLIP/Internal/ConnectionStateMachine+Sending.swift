internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

extension ConnectionStateMachine {
    /// A streamed request body threw: the request fails with `error`.
    mutating func bodyFailed(token: UInt64, id: BLIPOutgoingID, error: any Error, effects: inout Effects) {
        self.tokens.removeValue(forKey: token)
        self.tokenOfMessage.removeValue(forKey: id)
        if let waiter = self.replyWaiters.removeValue(forKey: id) {
            ConnectionStateMachine.fail(waiter, error, effects: &effects)
        }
        if let waiter = self.demandWaiters.removeValue(forKey: id) {
            effects.later { waiter.resume(throwing: error) }
        }
        self.progressFailed(request: id, effects: &effects)
        self.abandonOutgoing(id, effects: &effects)
    }

    /// A no-reply request whose caller waits until its last frame has left.
    mutating func enqueueAwaitingSend(
        _ message: BLIPOutgoingMessage,
        token: UInt64,
        progress: ProgressReporter?,
        continuation: WaiterContinuation<Void, any Error>,
        effects: inout Effects
    ) {
        guard
            let id = self.enqueue(
                message,
                token: token,
                progress: progress,
                failing: continuation,
                effects: &effects
            )
        else { return }
        self.sendWaiters[id] = continuation
        if self.readingPaused { self.updateReading(effects: &effects) }
    }

    /// A request whose caller waits for its reply (`waiter`).
    mutating func enqueueAwaitingReply<Reply>(
        _ message: BLIPOutgoingMessage,
        token: UInt64,
        progress: ProgressReporter?,
        waiter: ReplyWaiter,
        failing continuation: WaiterContinuation<Reply, any Error>,
        started: AsyncStream<BLIPOutgoingID>.Continuation?,
        effects: inout Effects
    ) {
        guard
            let id = self.enqueue(
                message,
                token: token,
                progress: progress,
                failing: continuation,
                effects: &effects
            )
        else { return }
        self.replyWaiters[id] = waiter
        started?.yield(id)
        // Reading may have paused while nothing waited for the peer: now something does.
        if self.readingPaused { self.updateReading(effects: &effects) }
    }

    /// The caller holding `token` gave up: its request fails with `error` and the engine drops or finishes it.
    mutating func cancelled(token: UInt64, error: any Error, effects: inout Effects) {
        guard let id = self.tokens.removeValue(forKey: token) else {
            self.cancelledTokens.insert(token)  // not queued yet: refuse it when it is
            return
        }
        self.tokenOfMessage.removeValue(forKey: id)
        self.progressFailed(request: id, effects: &effects)
        if let waiter = self.replyWaiters.removeValue(forKey: id) {
            ConnectionStateMachine.fail(waiter, error, effects: &effects)
        }
        if let waiter = self.sendWaiters.removeValue(forKey: id) {
            effects.later { waiter.resume(throwing: error) }
        }
        if let waiter = self.demandWaiters.removeValue(forKey: id) {
            effects.later { waiter.resume(throwing: error) }
        }
        self.abandonOutgoing(id, effects: &effects)
    }

    /// A piece of a streamed request body: `continuation` resumes when the engine wants more (or at once).
    mutating func appendBody(
        _ chunk: ByteBuffer,
        to id: BLIPOutgoingID,
        isComplete: Bool,
        continuation: WaiterContinuation<Void, any Error>,
        effects: inout Effects
    ) {
        if let closeError = self.closeError {
            effects.later { continuation.resume(throwing: closeError) }
            return
        }
        do throws(BLIPEngineError) {
            effects.wakeWriter = try self.engine.appendBody(id, chunk, isComplete: isComplete)
        } catch {
            // Cancelled meanwhile: the request has already failed.
            effects.later { continuation.resume(throwing: CancellationError()) }
            return
        }
        if isComplete || self.engine.wantsBody(id) {
            effects.later { continuation.resume() }
        } else {
            self.demandWaiters[id] = continuation
            if self.readingPaused { self.updateReading(effects: &effects) }
        }
    }

    /// The transport asks for the next frame: nil if none is ready. `more` says whether another is ready behind it.
    mutating func nextFrame(into buffer: inout ByteBuffer, more: inout Bool, effects: inout Effects) -> BLIPSentFrame? {
        defer { more = self.engine.hasFrameReady }
        guard !self.isClosed || self.finishingReplies > 0 else { return nil }
        let next: BLIPNextFrame
        do throws(BLIPEngineError) {
            next = try self.engine.nextFrame(into: &buffer, now: .now())
        } catch {
            self.fatal(error, byPeer: false, effects: &effects)
            self.finishingReplies = 0
            return nil
        }
        guard case .frame(let frame) = next else {
            if self.finishingReplies > 0 {
                self.finishingReplies = 0
                _ = self.engine.close()
            }
            return nil
        }
        self.statistics.framesSent += 1
        self.statistics.bytesSent += frame.length
        if self.finishingReplies > 0 {
            self.finishingReplies = max(0, self.finishingReplies - frame.length)
            if self.finishingReplies == 0 { _ = self.engine.close() }
            return frame
        }
        if let id = frame.message {
            self.progressSent(frame, of: id, effects: &effects)
            // Most messages have no waiter: the emptiness checks skip hashing the id for each frame.
            if frame.isLastFrame, !self.sendWaiters.isEmpty, let waiter = self.sendWaiters.removeValue(forKey: id) {
                self.forgetToken(of: id)
                effects.later { waiter.resume() }
            }
            if !self.demandWaiters.isEmpty, let waiter = self.demandWaiters[id], self.engine.wantsBody(id) {
                self.demandWaiters.removeValue(forKey: id)
                effects.later { waiter.resume() }
            }
        }
        return frame
    }

    /// A handler's reply (or ERR) to the peer's request `number`: queued, and the request's `charge` let go of.
    mutating func queueReply(
        _ message: BLIPOutgoingMessage,
        to number: UInt64,
        releasing charge: Int,
        andThen: ((inout ConnectionStateMachine, inout Effects) -> Void)?,
        effects: inout Effects
    ) {
        self.release(charge, effects: &effects)
        _ = self.enqueueReply(message, to: number, effects: &effects)
        self.closeIfAskedAfterReply(to: number, effects: &effects)
        andThen?(&self, &effects)
    }

    /// Tells the engine one of our messages is abandoned. A streamed body that stopped after its first
    /// frame cannot be finished: the connection closes (1011, our failure, not the peer's).
    mutating func abandonOutgoing(_ id: BLIPOutgoingID, effects: inout Effects) {
        guard !self.isClosed else { return }
        do throws(BLIPEngineError) {
            _ = try self.engine.cancel(id)
            self.updateReplyBacklog(effects: &effects)
        } catch {
            self.fatal(error, byPeer: false, effects: &effects)
        }
    }

    /// ``enqueue(_:token:progress:effects:)`` for an awaiting caller: on failure its continuation gets
    /// the error after the lock, and this returns nil.
    mutating func enqueue<Value>(
        _ message: BLIPOutgoingMessage,
        token: UInt64?,
        progress: ProgressReporter?,
        failing continuation: WaiterContinuation<Value, any Error>,
        effects: inout Effects
    ) -> BLIPOutgoingID? {
        switch self.enqueue(message, token: token, progress: progress, effects: &effects) {
        case .success(let id): return id
        case .failure(let error):
            effects.later { continuation.resume(throwing: error) }
            return nil
        }
    }

    /// Queues `message` under the lock; returns its handle, or the error it failed with (its progress
    /// reporter is told after the lock), which the caller hands its waiter after the lock too. A result,
    /// not a failure closure: that closure was a heap allocation per request, made to be dropped.
    mutating func enqueue(
        _ message: BLIPOutgoingMessage,
        token: UInt64?,
        progress: ProgressReporter?,
        effects: inout Effects
    ) -> Result<BLIPOutgoingID, any Error> {
        let failure: any Error
        if let closeError = self.closeError {
            failure = closeError
        } else if let token, !self.cancelledTokens.isEmpty, self.cancelledTokens.remove(token) != nil {
            failure = CancellationError()
        } else {
            do throws(BLIPEngineError) {
                let (id, wake) = try self.engine.enqueue(message)
                if let token {
                    self.tokens[token] = id
                    self.tokenOfMessage[id] = token
                }
                if let progress { self.progressQueued(id, progress, effects: &effects) }
                effects.wakeWriter = effects.wakeWriter || wake
                effects.counts.messagesSent += 1
                return .success(id)
            } catch {
                failure = self.connectionError(from: error)
            }
        }
        if let progress { effects.later { progress.report(.failed) } }
        return .failure(failure)
    }

    // MARK: - Replies

    /// Queues a reply (or ERR) to the peer's request `number`; one that cannot be encoded becomes ERR
    /// BLIP/500 (see ``respond(to:with:releasing:)``). Returns the reply's handle, or nil if it was not
    /// queued.
    mutating func enqueueReply(
        _ message: BLIPOutgoingMessage,
        to number: UInt64,
        effects: inout Effects
    ) -> BLIPOutgoingID? {
        // Closed, the engine may still be framing the replies queued before (after the peer's error, or a
        // close asked for after a reply): nothing joins them.
        guard !self.isClosed else { return nil }
        do throws(BLIPEngineError) {
            let (id, wake) = try self.engine.enqueue(message)
            effects.wakeWriter = effects.wakeWriter || wake
            effects.counts.messagesSent += 1
            if case .error = message.kind { effects.counts.errorRepliesSent += 1 }
            self.updateReplyBacklog(effects: &effects)
            return id
        } catch  where error.code == .invalidMessage {
            self.log(
                .error,
                "the reply to request #\(number) could not be encoded; sent ERR BLIP/500 instead",
                ["blip.error": "\(error)"],
                effects: &effects
            )
            let failure = BLIPError(code: .internalError, message: "the reply could not be encoded")
            self.enqueueReply(failure, to: number, effects: &effects)
        } catch {
            self.log(.debug, "reply to request #\(number) not sent", ["blip.error": "\(error)"], effects: &effects)
        }
        return nil
    }
}
