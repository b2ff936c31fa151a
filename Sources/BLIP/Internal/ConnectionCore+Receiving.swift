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
            guard !state.isClosed else { return }
            state.statistics.framesReceived += 1
            state.statistics.bytesReceived += frame.readableBytes
            var result: BLIPReceiveResult
            do throws(BLIPEngineError) {
                result = try state.engine.receive(frame, now: .now())
            } catch {
                self.fatal(error, byPeer: true, &state, effects: &effects)
                return
            }
            effects.wakeWriter = result.wakeWriter
            if let acknowledged = result.acknowledged {
                self.progressAcknowledged(acknowledged, &state, effects: &effects)
            }
            // Taken, not bound: binding copies the event (its message, properties and body) out of the result.
            if let event = result.event.take() { self.handle(event, &state, effects: &effects) }
            // A request the order waited for may have been dropped by the engine unannounced (too large
            // before its properties were in).
            if state.order.hasReadyItems { self.releaseInOrder(&state, effects: &effects) }
            if !state.closesAfterReply.isEmpty { self.closeAfterReleasedReplies(&state, effects: &effects) }
            // The message let through while ACKs are withheld may have ended (complete, refused, failed)
            // without freeing anything (it waits for a handler, or in serial order): another goes on.
            if state.exempt == nil && !state.withheld.isEmpty { self.relieveWithheld(&state, effects: &effects) }
            // Property blocks still arriving are held by the engine: they count too.
            if !state.isClosed && self.checkHardLimit(&state, effects: &effects) {
                self.updateReading(&state, effects: &effects)
            }
        }
        self.perform(&effects)
        if self.tracesFrames {
            self.logger.trace("received frame", metadata: ["blip.length": "\(frame.readableBytes)"])
        }
    }

    private func handle(_ event: BLIPEngineEvent, _ state: inout State, effects: inout Effects) {
        switch event {
        case .messageStarted(let message):
            if message.type == .request {
                self.requestStarted(message, &state, effects: &effects)
            } else {
                self.replyStarted(message, &state, effects: &effects)
            }
        case .bodyReceived(let id, let body, let isComplete):
            self.bodyReceived(id, body, isComplete: isComplete, &state, effects: &effects)
        case .messageFailed(let id, let request, let error):
            let failure = self.connectionError(from: error)
            switch state.inbound.removeValue(forKey: id) {
            case .reply(let assembly, let waiter):
                self.assemblyEnded(id, assembly, &state)
                Self.fail(waiter, failure, effects: &effects)
                self.release(assembly.charge, &state, effects: &effects)
            case .request(let assembly, _):
                self.assemblyEnded(id, assembly, &state)
                self.release(assembly.charge, &state, effects: &effects)
                self.settledInOrder(id.number, &state, effects: &effects)
            case .streamed, nil:
                break
            }
            if let request {
                if let waiter = state.replyWaiters.removeValue(forKey: request) {
                    Self.fail(waiter, failure, effects: &effects)
                }
                // A reply that failed in its first frame never started: its caller's token goes here.
                state.forgetToken(of: request)
                self.progressFailed(request: request, &state, effects: &effects)
            }
            self.progressFailed(reply: id, &state, effects: &effects)
            self.failStream(&state, id, failure, effects: &effects)
            self.log(
                .debug,
                "incoming message failed",
                ["blip.message": "\(id)", "blip.error": "\(error)"],
                effects: &effects
            )
        }
    }

    private func bodyReceived(
        _ id: BLIPIncomingID,
        _ body: ByteBuffer,
        isComplete: Bool,
        _ state: inout State,
        effects: inout Effects
    ) {
        // Taken out of the table while it grows, so that the accumulated body has one owner and appending
        // to it never copies it.
        guard let inbound = state.inbound.removeValue(forKey: id) else { return }
        switch consume inbound {
        case .request(var assembly, let route):
            guard self.grow(&assembly, id, with: body, isComplete: isComplete, &state, effects: &effects) else {
                self.settledInOrder(id.number, &state, effects: &effects)
                return
            }
            if isComplete {
                self.assemblyEnded(id, assembly, &state)
                self.requestComplete(
                    assembly.message,
                    body: assembly.body,
                    route: route,
                    charge: assembly.charge,
                    beganWhileClosing: assembly.beganWhileClosing,
                    &state,
                    effects: &effects
                )
            } else {
                state.inbound[id] = .request(assembly, route: route)
            }
        case .reply(var assembly, let waiter):
            guard self.grow(&assembly, id, with: body, isComplete: isComplete, &state, effects: &effects) else {
                self.progressFailed(reply: id, &state, effects: &effects)
                Self.fail(waiter, state.closeError ?? self.tooLargeError(id), effects: &effects)
                return
            }
            self.progressReplyReceived(id, bytes: body.readableBytes, isComplete: isComplete, &state, effects: &effects)
            if isComplete {
                self.assemblyEnded(id, assembly, &state)
                self.release(assembly.charge, &state, effects: &effects)
                self.replyComplete(assembly.message, body: assembly.body, waiter: waiter, effects: &effects)
            } else {
                state.inbound[id] = .reply(assembly, waiter: waiter)
            }
        case .streamed:
            if !isComplete { state.inbound[id] = .streamed }
            self.progressReplyReceived(id, bytes: body.readableBytes, isComplete: isComplete, &state, effects: &effects)
            self.yield(body, isComplete: isComplete, to: id, &state, effects: &effects)
        }
    }

    /// Appends a piece to a whole message being assembled (`isComplete`: its last). Returns false if the
    /// message grew too large to be held (it is refused and the rest drained; a request is answered ERR
    /// BLIP/413) or the connection failed.
    private func grow(
        _ assembly: inout Assembly,
        _ id: BLIPIncomingID,
        with body: ByteBuffer,
        isComplete: Bool,
        _ state: inout State,
        effects: inout Effects
    ) -> Bool {
        var body = body
        let count = body.readableBytes
        guard assembly.body.readableBytes + count <= self.wholeBodyLimit else {
            self.assemblyEnded(id, assembly, &state)
            self.release(assembly.charge, &state, effects: &effects)
            if isComplete {
                // The engine has finished the message: there is nothing left to drain, and it would not
                // answer it. A request is answered here.
                if id.isRequest { self.answerTooLarge(assembly.message, &state, effects: &effects) }
            } else {
                self.refuse(id, &state, effects: &effects)
            }
            return false
        }
        assembly.body.writeBuffer(&body)
        assembly.charge += count
        state.assembling += count
        guard self.charge(count, &state, effects: &effects) else { return false }
        if self.shedsWaitingRequest(id, assembly, state) {
            self.shed(id, assembly, &state, effects: &effects)
            return false
        }
        self.consumeOrWithhold(id, &assembly, bytes: count, &state, effects: &effects)
        return true
    }

    /// The engine drains the rest of a message we will not hold (a request gets ERR BLIP/413).
    private func refuse(_ id: BLIPIncomingID, _ state: inout State, effects: inout Effects) {
        do throws(BLIPEngineError) {
            if try state.engine.refuse(id) { effects.wakeWriter = true }
        } catch {
            self.fatal(error, byPeer: false, &state, effects: &effects)
        }
        self.log(.debug, "message too large to hold", ["blip.message": "\(id)"], effects: &effects)
    }

    func tooLargeError(_ id: BLIPIncomingID) -> BLIPConnectionError {
        BLIPConnectionError(.messageTooLarge, "\(id) is larger than \(self.wholeBodyLimit) bytes, the most read whole")
    }

    /// Starts assembling a whole message whose first frame has arrived; nil if it is already too large.
    private func startAssembly(
        _ message: BLIPIncomingMessage,
        _ state: inout State,
        effects: inout Effects
    ) -> Assembly? {
        guard message.body.readableBytes <= self.wholeBodyLimit else {
            self.refuse(message.id, &state, effects: &effects)
            return nil
        }
        var shell = message
        shell.body = ByteBuffer()  // the body has one owner, so that appending never copies it
        var assembly = Assembly(message: shell, body: message.body, charge: Self.charge(of: message))
        assembly.beganWhileClosing = state.isDraining
        state.assembling += assembly.charge
        guard self.charge(assembly.charge, &state, effects: &effects) else { return nil }
        if self.shedsWaitingRequest(message.id, assembly, state) {
            self.shed(message.id, assembly, &state, effects: &effects)
            return nil
        }
        self.consumeOrWithhold(message.id, &assembly, bytes: message.body.readableBytes, &state, effects: &effects)
        return assembly
    }

    // MARK: - Requests from the peer

    private func requestStarted(_ message: BLIPIncomingMessage, _ state: inout State, effects: inout Effects) {
        let route = self.route(for: message.properties, &state)
        let number = message.id.number
        self.orderStarted(number, route: route, &state)
        // During a graceful close a streamed request is not started: it is read like a whole one (within the
        // same limits) and refused once complete, below.
        if case .streaming(let handler) = route, !(message.expectsReply && state.isDraining) {
            let request = BLIPStreamedRequest(
                properties: message.properties,
                isUrgent: message.flags.contains(.urgent),
                isCompressed: message.flags.contains(.compressed),
                body: BLIPBodyStream(source: BodyStreamSource(core: self, id: message.id))
            )
            state.streams[message.id] = BodyStreamState()
            if !message.isComplete { state.inbound[message.id] = .streamed }
            self.yield(message.body, isComplete: message.isComplete, to: message.id, &state, effects: &effects)
            guard !state.isClosed else {
                effects.released.append(request)
                return
            }
            let work = Work.handleStreaming(request, number: number, expectsReply: message.expectsReply, handler)
            self.inOrder(.work(work), number: number, charge: 0, &state, effects: &effects)
            return
        }
        if message.isComplete {
            guard message.body.readableBytes <= self.wholeBodyLimit else {
                self.answerTooLarge(message, &state, effects: &effects)
                self.settledInOrder(number, &state, effects: &effects)
                return
            }
            let charge = Self.charge(of: message)
            guard self.charge(charge, &state, effects: &effects) else { return }
            self.requestComplete(
                message,
                body: message.body,
                route: route,
                charge: charge,
                beganWhileClosing: state.isDraining,
                &state,
                effects: &effects
            )
        } else if let assembly = self.startAssembly(message, &state, effects: &effects) {
            state.inbound[message.id] = .request(assembly, route: route)
        } else {
            self.settledInOrder(number, &state, effects: &effects)  // refused: too large to hold
        }
    }

    /// A request that arrived whole but is larger than a whole body may be: ERR BLIP/413.
    private func answerTooLarge(_ message: BLIPIncomingMessage, _ state: inout State, effects: inout Effects) {
        guard message.expectsReply else { return }
        let error = BLIPError(code: .payloadTooLarge, message: "message too large")
        self.enqueueReply(error, to: message.id.number, &state, effects: &effects)
    }

    private func requestComplete(
        _ message: BLIPIncomingMessage,
        body: ByteBuffer,
        route: BLIPRouter.Route?,
        charge: Int,
        beganWhileClosing: Bool,
        _ state: inout State,
        effects: inout Effects
    ) {
        effects.counts.messagesReceived += 1
        self.log(
            .debug,
            "received request",
            [
                "blip.request": "\(message.id.number)",
                "blip.profile": "\(message.properties.profile ?? "")",
                "blip.bytes": "\(body.readableBytes)",
            ],
            effects: &effects
        )
        if self.configuration.logsMessageBodies {
            self.log(.debug, "request body", ["blip.body": "\(String(buffer: body))"], effects: &effects)
        }
        // Requests that would be held (for a handler, or in the incoming-request buffer); a 404 is not.
        let number = message.id.number
        if case .ping = route {
            self.release(charge, &state, effects: &effects)
            if message.expectsReply { self.enqueuePingReply(to: number, &state, effects: &effects) }
            return
        }
        let isHeld = route != nil || self.configuration.unhandledRequests == .deliver
        if message.expectsReply && isHeld && beganWhileClosing {
            self.refuseWhileClosing(message, charge: charge, &state, effects: &effects)
            self.settledInOrder(number, &state, effects: &effects)
            return
        }
        if message.expectsReply && isHeld && self.mustRefuseRequests(number, state) {
            // Full, and reading cannot pause without keeping a running handler (or, in serial order, an
            // earlier request still arriving) from finishing.
            self.release(charge, &state, effects: &effects)
            state.statistics.requestsRefusedBusy += 1
            let error = BLIPError(code: .busy, message: "the connection is too busy to take this request")
            self.enqueueReply(error, to: number, &state, effects: &effects)
            self.settledInOrder(number, &state, effects: &effects)
            return
        }
        let request = BLIPRequest(
            properties: message.properties,
            body: body,
            urgent: message.flags.contains(.urgent),
            compressed: message.flags.contains(.compressed)
        )
        switch route {
        case .whole(let handler):
            let work = Work.handle(request, number: number, expectsReply: message.expectsReply, charge: charge, handler)
            self.inOrder(.work(work), number: number, charge: charge, &state, effects: &effects)
        case .synchronous(let handler):
            let work = ImmediateWork(
                request: request,
                number: number,
                expectsReply: message.expectsReply,
                charge: charge,
                handler: handler
            )
            self.inOrder(.immediate(work), number: number, charge: charge, &state, effects: &effects)
        case .streaming, .ping:
            preconditionFailure("streaming requests are dispatched when they start; PING is answered above")
        case nil:
            self.unhandled(request, message, charge: charge, &state, effects: &effects)
        }
    }

    /// A request that began arriving during a graceful close: what is in flight finishes, nothing new
    /// starts. ERR BLIP/503.
    private func refuseWhileClosing(
        _ message: BLIPIncomingMessage,
        charge: Int,
        _ state: inout State,
        effects: inout Effects
    ) {
        self.release(charge, &state, effects: &effects)
        state.statistics.requestsRefusedClosing += 1
        let error = BLIPError(code: .busy, message: "the connection is closing")
        self.enqueueReply(error, to: message.id.number, &state, effects: &effects)
    }

    private func unhandled(
        _ request: BLIPRequest,
        _ message: BLIPIncomingMessage,
        charge: Int,
        _ state: inout State,
        effects: inout Effects
    ) {
        effects.counts.unhandledRequests += 1
        switch self.configuration.unhandledRequests {
        case .respondNotFound:
            self.release(charge, &state, effects: &effects)
            self.settledInOrder(message.id.number, &state, effects: &effects)
            guard message.expectsReply else { return }
            let error = BLIPError(
                code: .notFound,
                message: "no handler for profile \"\(message.properties.profile ?? "")\""
            )
            self.enqueueReply(error, to: message.id.number, &state, effects: &effects)
        case .deliver:
            let incoming = BLIPIncomingRequest(
                core: self,
                request: request,
                number: message.id.number,
                expectsReply: message.expectsReply,
                charge: charge
            )
            self.inOrder(.deliver(incoming), number: message.id.number, charge: charge, &state, effects: &effects)
        }
    }

    /// Hands a request no handler takes to ``BLIPConnection/incomingRequests``.
    func deliverUnhandled(_ incoming: BLIPIncomingRequest, _ state: inout State, effects: inout Effects) {
        if let waiter = state.unhandledWaiter {
            state.unhandledWaiter = nil
            effects.later { waiter.resume(returning: incoming) }
        } else {
            state.unhandled.append(incoming)
        }
    }

    /// The empty reply to ``BLIPRouter/pingProfile`` that Sync Gateway gives.
    private func enqueuePingReply(to number: UInt64, _ state: inout State, effects: inout Effects) {
        let reply = BLIPOutgoingMessage(.response(toRequest: number), properties: [:])
        _ = self.enqueueReply(reply, to: number, &state, effects: &effects)
    }

    /// Queues an ERR reply the connection gives on its own (404, 413, 503).
    func enqueueReply(_ error: BLIPError, to number: UInt64, _ state: inout State, effects: inout Effects) {
        guard !state.isClosed else { return }
        let reply = BLIPOutgoingMessage(
            .error(toRequest: number),
            properties: error.errorReplyProperties,
            body: .buffer(ByteBuffer(string: error.message))
        )
        do throws(BLIPEngineError) {
            let (_, wake) = try state.engine.enqueue(reply)
            effects.wakeWriter = effects.wakeWriter || wake
            effects.counts.errorRepliesSent += 1
            effects.counts.messagesSent += 1
            self.updateReplyBacklog(&state, effects: &effects)
        } catch {
            self.log(.debug, "reply to request #\(number) not sent", ["blip.error": "\(error)"], effects: &effects)
        }
    }

    // MARK: - Replies from the peer

    /// The route of a request's profile. The last one found is kept: requests mostly come in runs of one
    /// profile, and comparing a string costs less than hashing it.
    private func route(for properties: BLIPProperties, _ state: inout State) -> BLIPRouter.Route? {
        guard let profile = properties.profile else { return nil }
        // Read in place: binding the cached pair copied it (profile and route) for every request.
        if state.lastRoute?.profile == profile { return state.lastRoute?.route }
        let route = self.router.route(forProfile: profile)
        state.lastRoute = (profile, route)
        return route
    }

    private func replyStarted(_ message: BLIPIncomingMessage, _ state: inout State, effects: inout Effects) {
        guard let request = message.request, let waiter = state.replyWaiters.removeValue(forKey: request) else {
            // Its caller gave up after the request was sent: drain the rest.
            if !message.isComplete && state.engine.drain(message.id) { effects.wakeWriter = true }
            return
        }
        state.forgetToken(of: request)
        self.progressReplyStarted(message, to: request, &state, effects: &effects)
        if case .streamed(let continuation) = waiter, message.type == .response {
            state.streams[message.id] = BodyStreamState()
            if !message.isComplete { state.inbound[message.id] = .streamed }
            self.yield(message.body, isComplete: message.isComplete, to: message.id, &state, effects: &effects)
            if message.isComplete {
                self.progressReplyReceived(message.id, bytes: 0, isComplete: true, &state, effects: &effects)
            }
            let response = BLIPStreamedResponse(
                properties: message.properties,
                body: BLIPBodyStream(source: BodyStreamSource(core: self, id: message.id))
            )
            effects.counts.messagesReceived += 1
            effects.later { continuation.resume(returning: response) }
            return
        }
        // A whole reply, or an ERR (an ERR for a streamed reply is read whole and thrown).
        if message.isComplete {
            guard message.body.readableBytes <= self.wholeBodyLimit else {
                self.progressFailed(reply: message.id, &state, effects: &effects)
                Self.fail(waiter, self.tooLargeError(message.id), effects: &effects)
                return
            }
            self.progressReplyReceived(message.id, bytes: 0, isComplete: true, &state, effects: &effects)
            self.replyComplete(message, body: message.body, waiter: waiter, effects: &effects)
        } else if let assembly = self.startAssembly(message, &state, effects: &effects) {
            state.inbound[message.id] = .reply(assembly, waiter: waiter)
        } else {
            self.progressFailed(reply: message.id, &state, effects: &effects)
            Self.fail(waiter, state.closeError ?? self.tooLargeError(message.id), effects: &effects)
        }
    }

    private func replyComplete(
        _ message: BLIPIncomingMessage,
        body: ByteBuffer,
        waiter: ReplyWaiter,
        effects: inout Effects
    ) {
        effects.counts.messagesReceived += 1
        if message.type == .error {
            effects.counts.errorRepliesReceived += 1
            Self.fail(waiter, BLIPError(errorReplyProperties: message.properties, body: body), effects: &effects)
            return
        }
        let response = BLIPResponse(
            properties: message.properties,
            body: body,
            compressed: message.flags.contains(.compressed)
        )
        if !effects.deliver(response, to: waiter) {
            effects.later { Self.succeed(waiter, response) }
        }
    }
}
