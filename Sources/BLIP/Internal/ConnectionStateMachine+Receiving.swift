internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionStateMachine {
    func tooLargeError(_ id: BLIPIncomingID) -> BLIPConnectionError {
        BLIPConnectionError(.messageTooLarge, "\(id) is larger than \(self.wholeBodyLimit) bytes, the most read whole")
    }

    mutating func replyComplete(
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
            effects.later { ConnectionCore.succeed(waiter, response) }
        }
    }

    fileprivate mutating func handle(_ event: BLIPEngineEvent, effects: inout Effects) {
        switch event {
        case .messageStarted(let message):
            if message.type == .request {
                self.requestStarted(message, effects: &effects)
            } else {
                self.replyStarted(message, effects: &effects)
            }
        case .bodyReceived(let id, let body, let isComplete):
            self.bodyReceived(id, body, isComplete: isComplete, effects: &effects)
        case .messageFailed(let id, let request, let error):
            let failure = self.connectionError(from: error)
            switch self.inbound.removeValue(forKey: id) {
            case .reply(let assembly, let waiter):
                self.assemblyEnded(id, assembly)
                Self.fail(waiter, failure, effects: &effects)
                self.release(assembly.charge, effects: &effects)
            case .request(let assembly, _):
                self.assemblyEnded(id, assembly)
                self.release(assembly.charge, effects: &effects)
                self.settledInOrder(id.number, effects: &effects)
            case .streamed, nil:
                break
            }
            if let request {
                if let waiter = self.replyWaiters.removeValue(forKey: request) {
                    Self.fail(waiter, failure, effects: &effects)
                }
                // A reply that failed in its first frame never started: its caller's token goes here.
                self.forgetToken(of: request)
                self.progressFailed(request: request, effects: &effects)
            }
            self.progressFailed(reply: id, effects: &effects)
            self.failStream(id, failure, effects: &effects)
            self.log(
                .debug,
                "incoming message failed",
                ["blip.message": "\(id)", "blip.error": "\(error)"],
                effects: &effects
            )
        }
    }

    fileprivate mutating func bodyReceived(
        _ id: BLIPIncomingID,
        _ body: ByteBuffer,
        isComplete: Bool,
        effects: inout Effects
    ) {
        // Taken out of the table while it grows, so that the accumulated body has one owner and appending
        // to it never copies it.
        guard let inbound = self.inbound.removeValue(forKey: id) else { return }
        switch consume inbound {
        case .request(var assembly, let route):
            guard self.grow(&assembly, id, with: body, isComplete: isComplete, effects: &effects) else {
                self.settledInOrder(id.number, effects: &effects)
                return
            }
            if isComplete {
                self.assemblyEnded(id, assembly)
                self.requestComplete(
                    assembly.message,
                    body: assembly.body,
                    route: route,
                    charge: assembly.charge,
                    beganWhileClosing: assembly.beganWhileClosing,
                    effects: &effects
                )
            } else {
                self.inbound[id] = .request(assembly, route: route)
            }
        case .reply(var assembly, let waiter):
            guard self.grow(&assembly, id, with: body, isComplete: isComplete, effects: &effects) else {
                self.progressFailed(reply: id, effects: &effects)
                Self.fail(waiter, self.closeError ?? self.tooLargeError(id), effects: &effects)
                return
            }
            self.progressReplyReceived(id, bytes: body.readableBytes, isComplete: isComplete, effects: &effects)
            if isComplete {
                self.assemblyEnded(id, assembly)
                self.release(assembly.charge, effects: &effects)
                self.replyComplete(assembly.message, body: assembly.body, waiter: waiter, effects: &effects)
            } else {
                self.inbound[id] = .reply(assembly, waiter: waiter)
            }
        case .streamed:
            if !isComplete { self.inbound[id] = .streamed }
            self.progressReplyReceived(id, bytes: body.readableBytes, isComplete: isComplete, effects: &effects)
            self.yield(body, isComplete: isComplete, to: id, effects: &effects)
        }
    }

    /// Appends a piece to a whole message being assembled (`isComplete`: its last). Returns false if the
    /// message grew too large to be held (it is refused and the rest drained; a request is answered ERR
    /// BLIP/413) or the connection failed.
    fileprivate mutating func grow(
        _ assembly: inout Assembly,
        _ id: BLIPIncomingID,
        with body: ByteBuffer,
        isComplete: Bool,
        effects: inout Effects
    ) -> Bool {
        var body = body
        let count = body.readableBytes
        guard assembly.body.readableBytes + count <= self.wholeBodyLimit else {
            self.assemblyEnded(id, assembly)
            self.release(assembly.charge, effects: &effects)
            if isComplete {
                // The engine has finished the message: there is nothing left to drain, and it would not
                // answer it. A request is answered here.
                if id.isRequest { self.answerTooLarge(assembly.message, effects: &effects) }
            } else {
                self.refuse(id, effects: &effects)
            }
            return false
        }
        assembly.body.writeBuffer(&body)
        assembly.charge += count
        self.assembling += count
        guard self.charge(count, effects: &effects) else { return false }
        if self.shedsWaitingRequest(id, assembly) {
            self.shed(id, assembly, effects: &effects)
            return false
        }
        self.consumeOrWithhold(id, &assembly, bytes: count, effects: &effects)
        return true
    }

    /// The engine drains the rest of a message we will not hold (a request gets ERR BLIP/413).
    fileprivate mutating func refuse(_ id: BLIPIncomingID, effects: inout Effects) {
        do throws(BLIPEngineError) {
            if try self.engine.refuse(id) { effects.wakeWriter = true }
        } catch {
            self.fatal(error, byPeer: false, effects: &effects)
        }
        self.log(.debug, "message too large to hold", ["blip.message": "\(id)"], effects: &effects)
    }

    /// Starts assembling a whole message whose first frame has arrived; nil if it is already too large.
    fileprivate mutating func startAssembly(
        _ message: BLIPIncomingMessage,
        effects: inout Effects
    ) -> Assembly? {
        guard message.body.readableBytes <= self.wholeBodyLimit else {
            self.refuse(message.id, effects: &effects)
            return nil
        }
        var shell = message
        shell.body = ByteBuffer()  // the body has one owner, so that appending never copies it
        var assembly = Assembly(message: shell, body: message.body, charge: Self.charge(of: message))
        assembly.beganWhileClosing = self.isDraining
        self.assembling += assembly.charge
        guard self.charge(assembly.charge, effects: &effects) else { return nil }
        if self.shedsWaitingRequest(message.id, assembly) {
            self.shed(message.id, assembly, effects: &effects)
            return nil
        }
        self.consumeOrWithhold(message.id, &assembly, bytes: message.body.readableBytes, effects: &effects)
        return assembly
    }

    // MARK: - Requests from the peer

    fileprivate mutating func requestStarted(_ message: BLIPIncomingMessage, effects: inout Effects) {
        let route = self.route(for: message.properties)
        let number = message.id.number
        self.orderStarted(number, route: route)
        // During a graceful close a streamed request is not started: it is read like a whole one (within the
        // same limits) and refused once complete, below.
        if case .streaming(let handler) = route, !(message.expectsReply && self.isDraining) {
            let request = BLIPStreamedRequest(
                properties: message.properties,
                isUrgent: message.flags.contains(.urgent),
                isCompressed: message.flags.contains(.compressed),
                body: BLIPBodyStream(source: BodyStreamSource(core: self.owner, id: message.id))
            )
            self.streams[message.id] = BodyStreamState()
            if !message.isComplete { self.inbound[message.id] = .streamed }
            self.yield(message.body, isComplete: message.isComplete, to: message.id, effects: &effects)
            guard !self.isClosed else {
                effects.released.append(request)
                return
            }
            let work = Work.handleStreaming(request, number: number, expectsReply: message.expectsReply, handler)
            self.inOrder(.work(work), number: number, charge: 0, effects: &effects)
            return
        }
        if message.isComplete {
            guard message.body.readableBytes <= self.wholeBodyLimit else {
                self.answerTooLarge(message, effects: &effects)
                self.settledInOrder(number, effects: &effects)
                return
            }
            let charge = Self.charge(of: message)
            guard self.charge(charge, effects: &effects) else { return }
            self.requestComplete(
                message,
                body: message.body,
                route: route,
                charge: charge,
                beganWhileClosing: self.isDraining,
                effects: &effects
            )
        } else if let assembly = self.startAssembly(message, effects: &effects) {
            self.inbound[message.id] = .request(assembly, route: route)
        } else {
            self.settledInOrder(number, effects: &effects)  // refused: too large to hold
        }
    }

    /// A request that arrived whole but is larger than a whole body may be: ERR BLIP/413.
    fileprivate mutating func answerTooLarge(_ message: BLIPIncomingMessage, effects: inout Effects) {
        guard message.expectsReply else { return }
        let error = BLIPError(code: .payloadTooLarge, message: "message too large")
        self.enqueueReply(error, to: message.id.number, effects: &effects)
    }

    fileprivate mutating func requestComplete(
        _ message: BLIPIncomingMessage,
        body: ByteBuffer,
        route: BLIPRouter.Route?,
        charge: Int,
        beganWhileClosing: Bool,
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
            self.release(charge, effects: &effects)
            if message.expectsReply { self.enqueuePingReply(to: number, effects: &effects) }
            return
        }
        let isHeld = route != nil || self.configuration.unhandledRequests == .deliver
        if message.expectsReply && isHeld && beganWhileClosing {
            self.refuseWhileClosing(message, charge: charge, effects: &effects)
            self.settledInOrder(number, effects: &effects)
            return
        }
        if message.expectsReply && isHeld && self.mustRefuseRequests(number) {
            // Full, and reading cannot pause without keeping a running handler (or, in serial order, an
            // earlier request still arriving) from finishing.
            self.release(charge, effects: &effects)
            self.statistics.requestsRefusedBusy += 1
            let error = BLIPError(code: .busy, message: "the connection is too busy to take this request")
            self.enqueueReply(error, to: number, effects: &effects)
            self.settledInOrder(number, effects: &effects)
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
            self.inOrder(.work(work), number: number, charge: charge, effects: &effects)
        case .synchronous(let handler):
            let work = ImmediateWork(
                request: request,
                number: number,
                expectsReply: message.expectsReply,
                charge: charge,
                handler: handler
            )
            self.inOrder(.immediate(work), number: number, charge: charge, effects: &effects)
        case .streaming, .ping:
            preconditionFailure("streaming requests are dispatched when they start; PING is answered above")
        case nil:
            self.unhandled(request, message, charge: charge, effects: &effects)
        }
    }

    /// A request that began arriving during a graceful close: what is in flight finishes, nothing new
    /// starts. ERR BLIP/503.
    fileprivate mutating func refuseWhileClosing(
        _ message: BLIPIncomingMessage,
        charge: Int,
        effects: inout Effects
    ) {
        self.release(charge, effects: &effects)
        self.statistics.requestsRefusedClosing += 1
        let error = BLIPError(code: .busy, message: "the connection is closing")
        self.enqueueReply(error, to: message.id.number, effects: &effects)
    }

    fileprivate mutating func unhandled(
        _ request: BLIPRequest,
        _ message: BLIPIncomingMessage,
        charge: Int,
        effects: inout Effects
    ) {
        effects.counts.unhandledRequests += 1
        switch self.configuration.unhandledRequests {
        case .respondNotFound:
            self.release(charge, effects: &effects)
            self.settledInOrder(message.id.number, effects: &effects)
            guard message.expectsReply else { return }
            let error = BLIPError(
                code: .notFound,
                message: "no handler for profile \"\(message.properties.profile ?? "")\""
            )
            self.enqueueReply(error, to: message.id.number, effects: &effects)
        case .deliver:
            let incoming = BLIPIncomingRequest(
                core: self.owner,
                request: request,
                number: message.id.number,
                expectsReply: message.expectsReply,
                charge: charge
            )
            self.inOrder(.deliver(incoming), number: message.id.number, charge: charge, effects: &effects)
        }
    }

    /// Hands a request no handler takes to ``BLIPConnection/incomingRequests``.
    mutating func deliverUnhandled(_ incoming: BLIPIncomingRequest, effects: inout Effects) {
        if let waiter = self.unhandledWaiter {
            self.unhandledWaiter = nil
            effects.later { waiter.resume(returning: incoming) }
        } else {
            self.unhandled.append(incoming)
        }
    }

    /// The empty reply to ``BLIPRouter/pingProfile`` that Sync Gateway gives.
    fileprivate mutating func enqueuePingReply(to number: UInt64, effects: inout Effects) {
        let reply = BLIPOutgoingMessage(.response(toRequest: number), properties: [:])
        _ = self.enqueueReply(reply, to: number, effects: &effects)
    }

    /// Queues an ERR reply the connection gives on its own (404, 413, 503).
    mutating func enqueueReply(_ error: BLIPError, to number: UInt64, effects: inout Effects) {
        guard !self.isClosed else { return }
        let reply = BLIPOutgoingMessage(
            .error(toRequest: number),
            properties: error.errorReplyProperties,
            body: .buffer(ByteBuffer(string: error.message))
        )
        do throws(BLIPEngineError) {
            let (_, wake) = try self.engine.enqueue(reply)
            effects.wakeWriter = effects.wakeWriter || wake
            effects.counts.errorRepliesSent += 1
            effects.counts.messagesSent += 1
            self.updateReplyBacklog(effects: &effects)
        } catch {
            self.log(.debug, "reply to request #\(number) not sent", ["blip.error": "\(error)"], effects: &effects)
        }
    }

    // MARK: - Replies from the peer

    /// The route of a request's profile. The last one found is kept: requests mostly come in runs of one
    /// profile, and comparing a string costs less than hashing it.
    fileprivate mutating func route(for properties: BLIPProperties) -> BLIPRouter.Route? {
        guard let profile = properties.profile else { return nil }
        // Read in place: binding the cached pair copied it (profile and route) for every request.
        if self.lastRoute?.profile == profile { return self.lastRoute?.route }
        let route = self.router.route(forProfile: profile)
        self.lastRoute = (profile, route)
        return route
    }

    fileprivate mutating func replyStarted(_ message: BLIPIncomingMessage, effects: inout Effects) {
        guard let request = message.request, let waiter = self.replyWaiters.removeValue(forKey: request) else {
            // Its caller gave up after the request was sent: drain the rest.
            if !message.isComplete && self.engine.drain(message.id) { effects.wakeWriter = true }
            return
        }
        self.forgetToken(of: request)
        self.progressReplyStarted(message, to: request, effects: &effects)
        if case .streamed(let continuation) = waiter, message.type == .response {
            self.streams[message.id] = BodyStreamState()
            if !message.isComplete { self.inbound[message.id] = .streamed }
            self.yield(message.body, isComplete: message.isComplete, to: message.id, effects: &effects)
            if message.isComplete {
                self.progressReplyReceived(message.id, bytes: 0, isComplete: true, effects: &effects)
            }
            let response = BLIPStreamedResponse(
                properties: message.properties,
                body: BLIPBodyStream(source: BodyStreamSource(core: self.owner, id: message.id))
            )
            effects.counts.messagesReceived += 1
            effects.later { continuation.resume(returning: response) }
            return
        }
        // A whole reply, or an ERR (an ERR for a streamed reply is read whole and thrown).
        if message.isComplete {
            guard message.body.readableBytes <= self.wholeBodyLimit else {
                self.progressFailed(reply: message.id, effects: &effects)
                Self.fail(waiter, self.tooLargeError(message.id), effects: &effects)
                return
            }
            self.progressReplyReceived(message.id, bytes: 0, isComplete: true, effects: &effects)
            self.replyComplete(message, body: message.body, waiter: waiter, effects: &effects)
        } else if let assembly = self.startAssembly(message, effects: &effects) {
            self.inbound[message.id] = .reply(assembly, waiter: waiter)
        } else {
            self.progressFailed(reply: message.id, effects: &effects)
            Self.fail(waiter, self.closeError ?? self.tooLargeError(message.id), effects: &effects)
        }
    }
    /// A frame from the transport.
    mutating func receivedFrame(_ frame: ByteBuffer, effects: inout Effects) {
        guard !self.isClosed else { return }
        self.statistics.framesReceived += 1
        self.statistics.bytesReceived += frame.readableBytes
        var result: BLIPReceiveResult
        do throws(BLIPEngineError) {
            result = try self.engine.receive(frame, now: .now())
        } catch {
            self.fatal(error, byPeer: true, effects: &effects)
            return
        }
        effects.wakeWriter = result.wakeWriter
        if let acknowledged = result.acknowledged {
            self.progressAcknowledged(acknowledged, effects: &effects)
        }
        // Taken, not bound: binding copies the event (its message, properties and body) out of the result.
        if let event = result.event.take() { self.handle(event, effects: &effects) }
        // A request the order waited for may have been dropped by the engine unannounced (too large
        // before its properties were in).
        if self.order.hasReadyItems { self.releaseInOrder(effects: &effects) }
        if !self.closesAfterReply.isEmpty { self.closeAfterReleasedReplies(effects: &effects) }
        // The message let through while ACKs are withheld may have ended (complete, refused, failed)
        // without freeing anything (it waits for a handler, or in serial order): another goes on.
        if self.exempt == nil && !self.withheld.isEmpty { self.relieveWithheld(effects: &effects) }
        // Property blocks still arriving are held by the engine: they count too.
        if !self.isClosed && self.checkHardLimit(effects: &effects) {
            self.updateReading(effects: &effects)
        }
    }
}
