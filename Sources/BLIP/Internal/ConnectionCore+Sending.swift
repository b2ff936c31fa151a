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
        self.state.withLockedValue { $0.bodyFailed(token: token, id: id, error: error, effects: &effects) }
        self.perform(&effects)
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
                self.state.withLockedValue {
                    $0.enqueueAwaitingSend(
                        message,
                        token: token,
                        progress: progress,
                        continuation: continuation,
                        effects: &effects
                    )
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
        self.gzipAheadIfLarge(&message)
        return message
    }

    /// Bodies at least this large are gzipped before the lock (seed and BLIP 2).
    static let gzipAheadMinimumBody = 16 * 1024

    /// Gzips a large seed or BLIP 2 body here, before the lock, rather than when the engine queues it
    /// under the lock (``BLIPGzippedBody``: the same bytes). If zlib fails, the engine tries again.
    func gzipAheadIfLarge(_ message: inout BLIPOutgoingMessage) {
        guard let configuration = self.gzipAhead, message.isCompressed, case .buffer(let body) = message.body,
            body.readableBytes >= Self.gzipAheadMinimumBody,
            let gzipped = try? BLIPGzippedBody(gzipping: body, configuration: configuration)
        else { return }
        message.body = .buffer(gzipped.wireBody)
        message.gzippedAhead = gzipped.outcome
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
            self.state.withLockedValue {
                $0.enqueueAwaitingReply(
                    message,
                    token: token,
                    progress: progress,
                    waiter: waiter(continuation),
                    failing: continuation,
                    started: started,
                    effects: &effects
                )
            }
            started?.finish()
            self.perform(&effects)
        }
    }

    /// The caller of a request gave up: the engine drops it if it has not started, else finishes it and
    /// drops the reply. The caller gets `CancellationError` at once.
    func cancel(token: UInt64) {
        let error = CancellationError()
        var effects = Effects()
        self.state.withLockedValue { $0.cancelled(token: token, error: error, effects: &effects) }
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
            self.state.withLockedValue {
                $0.appendBody(chunk, to: id, isComplete: isComplete, continuation: continuation, effects: &effects)
            }
            self.perform(&effects)
        }
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
        let sent = self.state.withLockedValue { $0.nextFrame(into: &buffer, more: &more, effects: &effects) }
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
        andThen: ((inout ConnectionStateMachine, inout Effects) -> Void)? = nil
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
        var message: BLIPOutgoingMessage
        switch result {
        case .success(let response):
            message = BLIPOutgoingMessage(
                .response(toRequest: number),
                properties: response.properties,
                body: .buffer(response.body),
                compressed: response.isCompressed
            )
            self.gzipAheadIfLarge(&message)
        case .failure(let error):
            message = BLIPOutgoingMessage(
                .error(toRequest: number),
                properties: error.errorReplyProperties,
                body: .buffer(ByteBuffer(string: error.message))
            )
        }
        var effects = Effects()
        self.state.withLockedValue {
            $0.queueReply(message, to: number, releasing: charge, andThen: andThen, effects: &effects)
        }
        self.perform(&effects)
    }
}
