internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionCore {
    /// A frame from the transport.
    func received(_ frame: ByteBuffer) {
        var effects = Effects()
        self.metrics.bytesReceived.increment(by: Int64(frame.readableBytes))
        self.state.withLockedValue { state in
            guard state.closeError == nil else { return }
            state.statistics.framesReceived += 1
            state.statistics.bytesReceived += frame.readableBytes
            let result: BLIPReceiveResult
            do throws(BLIPEngineError) {
                result = try state.engine.receive(frame, now: .now())
            } catch {
                self.fatal(error, &state, effects: &effects)
                return
            }
            if self.tracesFrames {
                self.logger.trace("received frame", metadata: ["blip.length": "\(frame.readableBytes)"])
            }
            effects.wakeWriter = result.wakeWriter
            if let event = result.event { self.handle(event, &state, effects: &effects) }
        }
        self.perform(effects)
    }

    private func handle(_ event: BLIPEngineEvent, _ state: inout State, effects: inout Effects) {
        switch event {
        case .messageStarted(let message):
            if message.type == .request {
                self.requestStarted(message, &state, effects: &effects)
            } else {
                self.replyStarted(message, &state, effects: &effects)
            }
        case .bodyReceived(let id, var body, let isComplete):
            // Taken out of the table while it grows, so that the accumulated body has one owner and
            // appending to it never copies it.
            guard let inbound = state.inbound.removeValue(forKey: id) else { break }
            switch consume inbound {
            case .request(let message, var accumulated, let route):
                let count = body.readableBytes
                accumulated.writeBuffer(&body)
                Self.consumed(id, bytes: count, &state, effects: &effects)
                if isComplete {
                    self.requestComplete(message, body: accumulated, route: route, &state, effects: &effects)
                } else {
                    state.inbound[id] = .request(message, body: accumulated, route: route)
                }
            case .reply(let message, var accumulated, let waiter):
                accumulated.writeBuffer(&body)
                if isComplete {
                    self.replyComplete(message, body: accumulated, waiter: waiter, effects: &effects)
                } else {
                    state.inbound[id] = .reply(message, body: accumulated, waiter: waiter)
                }
            case .streamed:
                if !isComplete { state.inbound[id] = .streamed }
                Self.yield(body, isComplete: isComplete, to: id, &state, effects: &effects)
            case .discarded:
                Self.consumed(id, bytes: body.readableBytes, &state, effects: &effects)
                if !isComplete { state.inbound[id] = .discarded }
            }
        case .messageFailed(let id, let request, let error):
            let failure = self.connectionError(from: error)
            if case .reply(_, _, let waiter) = state.inbound.removeValue(forKey: id) {
                Self.fail(waiter, failure, effects: &effects)
            }
            if let request, let waiter = state.replyWaiters.removeValue(forKey: request) {
                Self.fail(waiter, failure, effects: &effects)
            }
            Self.failStream(&state, id, failure, effects: &effects)
            self.logger.debug("incoming message failed", metadata: ["blip.message": "\(id)", "blip.error": "\(error)"])
        }
    }

    // MARK: - Requests from the peer

    private func requestStarted(_ message: BLIPIncomingMessage, _ state: inout State, effects: inout Effects) {
        let route = self.router.route(for: message.properties)
        if case .streaming(let handler) = route {
            let request = BLIPStreamedRequest(
                properties: message.properties,
                isUrgent: message.flags.contains(.urgent),
                isCompressed: message.flags.contains(.compressed),
                body: BLIPBodyStream(source: BodyStreamSource(core: self, id: message.id))
            )
            state.streams[message.id] = BodyStreamState()
            if !message.isComplete { state.inbound[message.id] = .streamed }
            Self.yield(message.body, isComplete: message.isComplete, to: message.id, &state, effects: &effects)
            self.dispatch(
                .handleStreaming(request, number: message.id.number, expectsReply: message.expectsReply, handler),
                &state,
                effects: &effects
            )
            return
        }
        // Whole requests: consumed as buffered (ACKs flow), handled once complete.
        Self.consumed(message.id, bytes: message.body.readableBytes, &state, effects: &effects)
        if message.isComplete {
            self.requestComplete(message, body: message.body, route: route, &state, effects: &effects)
        } else {
            state.inbound[message.id] = .request(message, body: message.body, route: route)
        }
    }

    private func requestComplete(
        _ message: BLIPIncomingMessage,
        body: ByteBuffer,
        route: BLIPRouter.Route?,
        _ state: inout State,
        effects: inout Effects
    ) {
        self.metrics.messagesReceived.increment()
        let request = BLIPRequest(
            properties: message.properties,
            body: body,
            urgent: message.flags.contains(.urgent),
            compressed: message.flags.contains(.compressed)
        )
        self.logger.debug(
            "received request",
            metadata: [
                "blip.request": "\(message.id.number)",
                "blip.profile": "\(message.properties.profile ?? "")",
                "blip.bytes": "\(body.readableBytes)",
            ]
        )
        if self.configuration.logsMessageBodies {
            self.logger.debug("request body", metadata: ["blip.body": "\(String(buffer: body))"])
        }
        switch route {
        case .whole(let handler):
            self.dispatch(
                .handle(request, number: message.id.number, expectsReply: message.expectsReply, handler),
                &state,
                effects: &effects
            )
        case .streaming:
            preconditionFailure("streaming requests are dispatched when they start")
        case nil:
            self.unhandled(request, message, &state, effects: &effects)
        }
    }

    private func unhandled(
        _ request: BLIPRequest,
        _ message: BLIPIncomingMessage,
        _ state: inout State,
        effects: inout Effects
    ) {
        self.metrics.unhandledRequests.increment()
        switch self.configuration.unhandledRequests {
        case .respondNotFound:
            guard message.expectsReply else { return }
            let error = BLIPError(
                code: .notFound,
                message: "no handler for profile \"\(message.properties.profile ?? "")\""
            )
            let reply = BLIPOutgoingMessage(
                .error(toRequest: message.id.number),
                properties: error.errorReplyProperties,
                body: .buffer(ByteBuffer(string: error.message))
            )
            _ = self.enqueue(reply, token: nil, &state, effects: &effects) { _ in }
        case .deliver:
            let incoming = BLIPIncomingRequest(
                core: self,
                request: request,
                number: message.id.number,
                expectsReply: message.expectsReply
            )
            if let waiter = state.unhandledWaiter {
                state.unhandledWaiter = nil
                effects.later { waiter.resume(returning: incoming) }
            } else {
                state.unhandled.append(incoming)
                if state.unhandled.count >= self.configuration.incomingRequestBufferSize {
                    self.pauseReading(&state, effects: &effects)
                }
            }
        }
    }

    private func dispatch(_ work: Work, _ state: inout State, effects: inout Effects) {
        state.activeHandlers += 1
        if state.activeHandlers >= self.configuration.maximumConcurrentHandlers {
            self.pauseReading(&state, effects: &effects)
        }
        effects.work = work
    }

    func pauseReading(_ state: inout State, effects: inout Effects) {
        guard !state.readingPaused else { return }
        state.readingPaused = true
        effects.pauseReading = true
    }

    /// Reading resumes once handlers and the incoming-request buffer are both below half their limits.
    func resumeReadingIfPossible(_ state: inout State, effects: inout Effects) {
        guard state.readingPaused,
            state.activeHandlers < self.configuration.maximumConcurrentHandlers / 2 + 1,
            state.unhandled.count < self.configuration.incomingRequestBufferSize / 2 + 1
        else { return }
        state.readingPaused = false
        effects.resumeReading = true
    }

    /// Runs a handler and sends what it returns.
    func handle(_ work: Work) async {
        let result: Result<BLIPResponse, BLIPError>
        let number: UInt64
        let expectsReply: Bool
        switch work {
        case .handle(let request, let requestNumber, let replyExpected, let handler):
            number = requestNumber
            expectsReply = replyExpected
            result = await self.run(number: number, expectsReply: expectsReply) { try await handler(request, $0) }
        case .handleStreaming(let request, let requestNumber, let replyExpected, let handler):
            number = requestNumber
            expectsReply = replyExpected
            result = await self.run(number: number, expectsReply: expectsReply) { try await handler(request, $0) }
        }
        if expectsReply { self.respond(to: number, with: result) }
        var effects = Effects()
        self.state.withLockedValue { state in
            state.activeHandlers -= 1
            self.resumeReadingIfPossible(&state, effects: &effects)
        }
        self.perform(effects)
    }

    private func run(
        number: UInt64,
        expectsReply: Bool,
        _ body: (BLIPRequestContext) async throws -> BLIPResponse
    ) async -> Result<BLIPResponse, BLIPError> {
        var logger = self.logger
        logger[metadataKey: "blip.request"] = "\(number)"
        let context = BLIPRequestContext(
            connection: BLIPConnection(core: self),
            logger: logger,
            requestNumber: number,
            expectsReply: expectsReply
        )
        do {
            return .success(try await body(context))
        } catch {
            return .failure(self.errorReply(for: error, logger: logger))
        }
    }

    /// The ERR reply for a handler's error: its own if it has one, else BLIP/501.
    func errorReply(for error: any Error, logger: Logger) -> BLIPError {
        if let error = error as? BLIPError { return error }
        if let error = error as? any BLIPErrorConvertible { return error.blipError }
        logger.debug("handler failed", metadata: ["blip.error": "\(error)"])
        return BLIPError(
            code: .handlerFailed,
            message: self.configuration.sendsHandlerErrorMessages ? "\(error)" : "handler failed"
        )
    }

    // MARK: - Replies from the peer

    private func replyStarted(_ message: BLIPIncomingMessage, _ state: inout State, effects: inout Effects) {
        guard let request = message.request, let waiter = state.replyWaiters.removeValue(forKey: request) else {
            // Its caller gave up after the request was sent: drain the rest.
            if !message.isComplete { state.inbound[message.id] = .discarded }
            Self.consumed(message.id, bytes: message.body.readableBytes, &state, effects: &effects)
            return
        }
        if let token = state.tokenOfMessage.removeValue(forKey: request) { state.tokens.removeValue(forKey: token) }
        if case .streamed(let continuation) = waiter, message.type == .response {
            state.streams[message.id] = BodyStreamState()
            if !message.isComplete { state.inbound[message.id] = .streamed }
            Self.yield(message.body, isComplete: message.isComplete, to: message.id, &state, effects: &effects)
            let response = BLIPStreamedResponse(
                properties: message.properties,
                body: BLIPBodyStream(source: BodyStreamSource(core: self, id: message.id))
            )
            self.metrics.messagesReceived.increment()
            effects.later { continuation.resume(returning: response) }
            return
        }
        // An ERR for a streamed reply is read whole and thrown.
        Self.consumed(message.id, bytes: message.body.readableBytes, &state, effects: &effects)
        if message.isComplete {
            self.replyComplete(message, body: message.body, waiter: waiter, effects: &effects)
        } else {
            state.inbound[message.id] = .reply(message, body: message.body, waiter: waiter)
        }
    }

    private func replyComplete(
        _ message: BLIPIncomingMessage,
        body: ByteBuffer,
        waiter: ReplyWaiter,
        effects: inout Effects
    ) {
        self.metrics.messagesReceived.increment()
        if message.type == .error {
            self.metrics.errorRepliesReceived.increment()
            Self.fail(waiter, BLIPError(errorReplyProperties: message.properties, body: body), effects: &effects)
            return
        }
        switch waiter {
        case .whole(let continuation):
            let response = BLIPResponse(
                properties: message.properties,
                body: body,
                compressed: message.flags.contains(.compressed)
            )
            effects.later { continuation.resume(returning: response) }
        case .streamed(let continuation):
            // Unreachable: a normal reply to a streaming request is streamed from its start.
            effects.later { continuation.resume(throwing: BLIPConnectionError(.invalidMessage, "unexpected reply")) }
        }
    }
}
