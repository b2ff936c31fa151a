internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

extension ConnectionCore {
    // MARK: - Requests

    // Every send of a caller that awaits takes a token (what a cancellation or a deadline finds its message
    // by) and runs within its deadline (ConnectionCore+Deadlines): one path, timed or not.

    func sendRequest(_ request: BLIPRequest, timeout: Duration?, progress: ProgressReporter?) async throws
        -> BLIPResponse
    {
        let token = self.makeToken()
        defer { self.forgetLateCancellation(of: token) }
        let message = self.outgoing(request, body: .buffer(request.body))
        return try await self.withDeadline(timeout, token: token, of: request) {
            try await withCancellationHandlerOnCallersExecutor(loop: self.loopIsolation) {
                try await self.awaitReply(message, token: token, progress: progress, started: nil) { .whole($0) }
            } onCancel: {
                self.cancel(token: token)
            }
        }
    }

    func sendRequestStreamingReply(
        _ request: BLIPRequest,
        timeout: Duration?,
        progress: ProgressReporter?
    ) async throws -> BLIPStreamedResponse {
        let message = self.outgoing(request, body: .buffer(request.body), streamsReply: true)
        let token = self.makeToken()
        defer { self.forgetLateCancellation(of: token) }
        return try await self.withDeadline(timeout, token: token, of: request) {
            try await withCancellationHandlerOnCallersExecutor(loop: self.loopIsolation) {
                try await self.awaitReply(message, token: token, progress: progress, started: nil) { .streamed($0) }
            } onCancel: {
                self.cancel(token: token)
            }
        }
    }

    /// Sends a request whose body is produced as it is sent; the body is fed while the reply is awaited.
    /// If the body sequence throws, the caller gets its error: a request not yet started is never sent;
    /// one already started cannot be finished, so the connection closes (BLIP cannot abort a message).
    func sendRequest<Body: AsyncSequence & Sendable>(
        _ request: BLIPRequest,
        body: Body,
        timeout: Duration?,
        progress: ProgressReporter?
    ) async throws -> BLIPResponse where Body.Element == ByteBuffer {
        let message = self.outgoing(request, body: .streamed)
        let token = self.makeToken()
        defer { self.forgetLateCancellation(of: token) }
        return try await self.withDeadline(timeout, token: token, of: request) {
            try await self.awaitReply(message, feeding: body, token: token, progress: progress)
        }
    }

    /// Queues a request with a streamed body and waits for its reply while feeding the body.
    private func awaitReply<Body: AsyncSequence & Sendable>(
        _ message: BLIPOutgoingMessage,
        feeding body: Body,
        token: UInt64,
        progress: ProgressReporter?
    ) async throws -> BLIPResponse where Body.Element == ByteBuffer {
        try await withTaskCancellationHandler {
            try await withThrowingTaskGroup(of: BLIPResponse?.self) { group in
                let (queued, started) = AsyncStream.makeStream(of: BLIPOutgoingID.self)
                group.addTask {
                    try await self.awaitReply(message, token: token, progress: progress, started: started) {
                        .whole($0)
                    }
                }
                group.addTask {
                    var ids = queued.makeAsyncIterator()
                    guard let id = await ids.next() else { return nil }
                    do {
                        try await self.feed(body, to: id)
                    } catch {
                        self.bodyFailed(token: token, id: id, error)
                        throw error
                    }
                    return nil
                }
                while let result = try await group.next() {
                    if let reply = result {
                        group.cancelAll()
                        return reply
                    }
                }
                throw BLIPConnectionError(.connectionClosed, "no reply")
            }
        } onCancel: {
            self.cancel(token: token)
        }
    }

    /// A streamed body threw (or was cancelled): its request fails with that error, and the message is
    /// dropped, or, once started, ends the connection.
    private func bodyFailed(token: UInt64, id: BLIPOutgoingID, _ error: any Error) {
        var effects = Effects()
        self.state.withLockedValue { state in
            state.tokens.removeValue(forKey: token)
            state.tokenOfMessage.removeValue(forKey: id)
            if let waiter = state.replyWaiters.removeValue(forKey: id) { Self.fail(waiter, error, effects: &effects) }
            if let waiter = state.demandWaiters.removeValue(forKey: id) {
                effects.later { waiter.resume(throwing: error) }
            }
            self.progressFailed(request: id, &state, effects: &effects)
            self.abandonOutgoing(id, &state, effects: &effects)
        }
        self.perform(&effects)
    }

    /// Tells the engine one of our messages is abandoned. A streamed body that stopped after its first
    /// frame cannot be finished: the connection closes (1011, our failure, not the peer's).
    func abandonOutgoing(_ id: BLIPOutgoingID, _ state: inout State, effects: inout Effects) {
        guard !state.isClosed else { return }
        do throws(BLIPEngineError) {
            _ = try state.engine.cancel(id)
            self.updateReplyBacklog(&state, effects: &effects)
        } catch {
            self.fatal(error, byPeer: false, &state, effects: &effects)
        }
    }

    func sendNoReply(_ request: BLIPRequest, timeout: Duration?, progress: ProgressReporter?) async throws {
        let message = self.outgoing(request, body: .buffer(request.body), isNoReply: true)
        let token = self.makeToken()
        defer { self.forgetLateCancellation(of: token) }
        try await self.withDeadline(timeout, token: token, of: request) {
            try await self.awaitSent(message, token: token, progress: progress)
        }
    }

    /// Queues a no-reply request and waits until its last frame has left.
    private func awaitSent(_ message: BLIPOutgoingMessage, token: UInt64, progress: ProgressReporter?) async throws {
        try await withCancellationHandlerOnCallersExecutor(loop: self.loopIsolation) {
            try await withWaiterContinuation { (continuation: WaiterContinuation<Void, any Error>) in
                var effects = Effects()
                self.state.withLockedValue { state in
                    guard
                        let id = self.enqueue(
                            message,
                            token: token,
                            progress: progress,
                            failing: continuation,
                            &state,
                            effects: &effects
                        )
                    else { return }
                    state.sendWaiters[id] = continuation
                    if state.readingPaused { self.updateReading(&state, effects: &effects) }
                }
                self.perform(&effects)
            }
        } onCancel: {
            self.cancel(token: token)
        }
    }

    func outgoing(
        _ request: BLIPRequest,
        body: BLIPOutgoingMessage.Body,
        streamsReply: Bool = false,
        isNoReply: Bool = false
    ) -> BLIPOutgoingMessage {
        var message = BLIPOutgoingMessage(
            .request,
            properties: request.properties,
            body: body,
            urgent: request.isUrgent,
            compressed: request.isCompressed
        )
        message.streamsReply = streamsReply
        message.isNoReply = isNoReply
        return message
    }

    func makeToken() -> UInt64 {
        self.nextToken.add(1, ordering: .relaxed).oldValue
    }

    /// A cancellation that came after the message had left the token tables (its reply had started, or it
    /// had been sent, or the connection had closed) was taken for one that came before queueing, and its
    /// token kept to refuse the message: forget it once the call is over. Only a cancelled call pays.
    private func forgetLateCancellation(of token: UInt64) {
        guard Task.isCancelled else { return }
        self.forgetCancelledToken(token)
    }

    /// Queues a request and waits for its reply. `started` learns the message's handle once queued.
    private func awaitReply<Reply>(
        _ message: BLIPOutgoingMessage,
        token: UInt64,
        progress: ProgressReporter?,
        started: AsyncStream<BLIPOutgoingID>.Continuation?,
        waiter: @escaping (WaiterContinuation<Reply, any Error>) -> ReplyWaiter
    ) async throws -> Reply {
        try await self.handOff { (continuation: WaiterContinuation<Reply, any Error>) in
            var effects = Effects()
            self.state.withLockedValue { state in
                guard
                    let id = self.enqueue(
                        message,
                        token: token,
                        progress: progress,
                        failing: continuation,
                        &state,
                        effects: &effects
                    )
                else { return }
                state.replyWaiters[id] = waiter(continuation)
                started?.yield(id)
                // Reading may have paused while nothing waited for the peer: now something does.
                if state.readingPaused { self.updateReading(&state, effects: &effects) }
            }
            started?.finish()
            self.perform(&effects)
        }
    }

    /// ``enqueue(_:token:progress:_:effects:)`` for an awaiting caller: on failure its continuation gets
    /// the error after the lock, and this returns nil.
    func enqueue<Value>(
        _ message: BLIPOutgoingMessage,
        token: UInt64?,
        progress: ProgressReporter?,
        failing continuation: WaiterContinuation<Value, any Error>,
        _ state: inout State,
        effects: inout Effects
    ) -> BLIPOutgoingID? {
        switch self.enqueue(message, token: token, progress: progress, &state, effects: &effects) {
        case .success(let id): return id
        case .failure(let error):
            effects.later { continuation.resume(throwing: error) }
            return nil
        }
    }

    /// Queues `message` under the lock; returns its handle, or the error it failed with (its progress
    /// reporter is told after the lock), which the caller hands its waiter after the lock too. A result,
    /// not a failure closure: that closure was a heap allocation per request, made to be dropped.
    func enqueue(
        _ message: BLIPOutgoingMessage,
        token: UInt64?,
        progress: ProgressReporter?,
        _ state: inout State,
        effects: inout Effects
    ) -> Result<BLIPOutgoingID, any Error> {
        let failure: any Error
        if let closeError = state.closeError {
            failure = closeError
        } else if let token, !state.cancelledTokens.isEmpty, state.cancelledTokens.remove(token) != nil {
            failure = CancellationError()
        } else {
            do throws(BLIPEngineError) {
                let (id, wake) = try state.engine.enqueue(message)
                if let token {
                    state.tokens[token] = id
                    state.tokenOfMessage[id] = token
                }
                if let progress { self.progressQueued(id, progress, &state, effects: &effects) }
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

    /// The caller of a request gave up: the engine drops it if it has not started, else finishes it and
    /// drops the reply. The caller gets `CancellationError` at once.
    func cancel(token: UInt64) {
        let error = CancellationError()
        var effects = Effects()
        self.state.withLockedValue { state in
            guard let id = state.tokens.removeValue(forKey: token) else {
                state.cancelledTokens.insert(token)  // not queued yet: refuse it when it is
                return
            }
            state.tokenOfMessage.removeValue(forKey: id)
            self.progressFailed(request: id, &state, effects: &effects)
            if let waiter = state.replyWaiters.removeValue(forKey: id) { Self.fail(waiter, error, effects: &effects) }
            if let waiter = state.sendWaiters.removeValue(forKey: id) {
                effects.later { waiter.resume(throwing: error) }
            }
            if let waiter = state.demandWaiters.removeValue(forKey: id) {
                effects.later { waiter.resume(throwing: error) }
            }
            self.abandonOutgoing(id, &state, effects: &effects)
        }
        self.perform(&effects)
    }

    /// Feeds a streamed body, waiting whenever the engine has enough of it queued.
    func feed<Body: AsyncSequence>(_ body: Body, to id: BLIPOutgoingID) async throws where Body.Element == ByteBuffer {
        var iterator = body.makeAsyncIterator()
        var next = try await iterator.next(isolation: #isolation)
        while true {
            let following: ByteBuffer? = next == nil ? nil : try await iterator.next(isolation: #isolation)
            let isComplete = following == nil
            try await self.appendBody(next ?? ByteBuffer(), to: id, isComplete: isComplete)
            if isComplete { return }
            next = following
        }
    }

    func appendBody(_ chunk: ByteBuffer, to id: BLIPOutgoingID, isComplete: Bool) async throws {
        try await withWaiterContinuation { (continuation: WaiterContinuation<Void, any Error>) in
            var effects = Effects()
            self.state.withLockedValue { state in
                if let closeError = state.closeError {
                    effects.later { continuation.resume(throwing: closeError) }
                    return
                }
                do throws(BLIPEngineError) {
                    effects.wakeWriter = try state.engine.appendBody(id, chunk, isComplete: isComplete)
                } catch {
                    // Cancelled meanwhile: the request has already failed.
                    effects.later { continuation.resume(throwing: CancellationError()) }
                    return
                }
                if isComplete || state.engine.wantsBody(id) {
                    effects.later { continuation.resume() }
                } else {
                    state.demandWaiters[id] = continuation
                    if state.readingPaused { self.updateReading(&state, effects: &effects) }
                }
            }
            self.perform(&effects)
        }
    }

    // MARK: - Replies

    /// Sends a handler's reply (or error) to the peer's request `number`, and lets go of the `charge` the
    /// request held against the buffer budget. A reply that cannot be encoded (a property with NUL, an
    /// empty value in the seed dialect, a block over the limit) is logged as an error and replaced by ERR
    /// BLIP/500, so that the peer never waits forever. A streamed reply is handed to ``run()``, which pulls
    /// its body (ConnectionCore+StreamedReplies).
    ///
    /// `andThen` runs under the same lock as the reply is queued (a finished handler's slot handed on), so that
    /// a request handled where it arrived costs one acquisition after its handler, not two.
    func respond(
        to number: UInt64,
        with result: Result<BLIPResponse, BLIPError>,
        releasing charge: Int = 0,
        andThen: ((inout State, inout Effects) -> Void)? = nil
    ) {
        if case .success(let response) = result, let body = response.bodyStream {
            self.releaseBuffered(charge)
            let head = StreamedReplyHead(
                number: number,
                properties: response.properties,
                isCompressed: response.isCompressed
            )
            self.schedule(.streamedReply(head, body))
            if let andThen {
                var effects = Effects()
                self.state.withLockedValue { andThen(&$0, &effects) }
                self.perform(&effects)
            }
            return
        }
        let message: BLIPOutgoingMessage
        switch result {
        case .success(let response):
            message = BLIPOutgoingMessage(
                .response(toRequest: number),
                properties: response.properties,
                body: .buffer(response.body),
                compressed: response.isCompressed
            )
        case .failure(let error):
            message = BLIPOutgoingMessage(
                .error(toRequest: number),
                properties: error.errorReplyProperties,
                body: .buffer(ByteBuffer(string: error.message))
            )
        }
        var effects = Effects()
        self.state.withLockedValue { state in
            self.release(charge, &state, effects: &effects)
            _ = self.enqueueReply(message, to: number, &state, effects: &effects)
            self.closeIfAskedAfterReply(to: number, &state, effects: &effects)
            andThen?(&state, &effects)
        }
        self.perform(&effects)
    }

    /// Queues a reply (or ERR) to the peer's request `number`; one that cannot be encoded becomes ERR
    /// BLIP/500 (see ``respond(to:with:releasing:)``). Returns the reply's handle, or nil if it was not
    /// queued.
    func enqueueReply(
        _ message: BLIPOutgoingMessage,
        to number: UInt64,
        _ state: inout State,
        effects: inout Effects
    ) -> BLIPOutgoingID? {
        // Closed, the engine may still be framing the replies queued before (after the peer's error, or a
        // close asked for after a reply): nothing joins them.
        guard !state.isClosed else { return nil }
        do throws(BLIPEngineError) {
            let (id, wake) = try state.engine.enqueue(message)
            effects.wakeWriter = effects.wakeWriter || wake
            effects.counts.messagesSent += 1
            if case .error = message.kind { effects.counts.errorRepliesSent += 1 }
            self.updateReplyBacklog(&state, effects: &effects)
            return id
        } catch  where error.code == .invalidMessage {
            self.log(
                .error,
                "the reply to request #\(number) could not be encoded; sent ERR BLIP/500 instead",
                ["blip.error": "\(error)"],
                effects: &effects
            )
            let failure = BLIPError(code: .internalError, message: "the reply could not be encoded")
            self.enqueueReply(failure, to: number, &state, effects: &effects)
        } catch {
            self.log(.debug, "reply to request #\(number) not sent", ["blip.error": "\(error)"], effects: &effects)
        }
        return nil
    }

    // MARK: - Writing

    /// Pulls the next frame for the transport. After a fatal error from the peer, replies already queued
    /// whole still go out (up to 1 MiB), then nothing.
    func nextFrame(into buffer: inout ByteBuffer) -> Bool {
        self.pullFrame(into: &buffer) != .none
    }

    /// ``nextFrame(into:)``, also saying whether another frame is ready behind this one, learnt under the
    /// same lock: a transport stops pulling when none is, rather than taking the lock again to find nothing.
    func pullFrame(into buffer: inout ByteBuffer) -> BLIPPulledFrame {
        var effects = Effects()
        let start = buffer.writerIndex
        var more = false
        let sent = self.state.withLockedValue { state -> BLIPSentFrame? in
            defer { more = state.engine.hasFrameReady }
            guard !state.isClosed || state.finishingReplies > 0 else { return nil }
            let next: BLIPNextFrame
            do throws(BLIPEngineError) {
                next = try state.engine.nextFrame(into: &buffer, now: .now())
            } catch {
                self.fatal(error, byPeer: false, &state, effects: &effects)
                state.finishingReplies = 0
                return nil
            }
            guard case .frame(let frame) = next else {
                if state.finishingReplies > 0 {
                    state.finishingReplies = 0
                    _ = state.engine.close()
                }
                return nil
            }
            state.statistics.framesSent += 1
            state.statistics.bytesSent += frame.length
            if state.finishingReplies > 0 {
                state.finishingReplies = max(0, state.finishingReplies - frame.length)
                if state.finishingReplies == 0 { _ = state.engine.close() }
                return frame
            }
            if let id = frame.message {
                self.progressSent(frame, of: id, &state, effects: &effects)
                // Most messages have no waiter: the emptiness checks skip hashing the id for each frame.
                if frame.isLastFrame, !state.sendWaiters.isEmpty, let waiter = state.sendWaiters.removeValue(forKey: id)
                {
                    state.forgetToken(of: id)
                    effects.later { waiter.resume() }
                }
                if !state.demandWaiters.isEmpty, let waiter = state.demandWaiters[id], state.engine.wantsBody(id) {
                    state.demandWaiters.removeValue(forKey: id)
                    effects.later { waiter.resume() }
                }
            }
            return frame
        }
        self.perform(&effects)
        guard let sent else { return .none }
        self.metrics.bytesSent.increment(by: Int64(buffer.writerIndex - start))
        if self.tracesFrames {
            self.logger.trace(
                "sent frame",
                metadata: ["blip.frame": "\(sent.header)", "blip.length": "\(sent.length)"]
            )
        }
        return more ? .frameWithMoreReady : .lastReadyFrame
    }
}
