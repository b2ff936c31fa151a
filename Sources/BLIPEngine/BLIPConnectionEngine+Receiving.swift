internal import BLIPWire
internal import DequeModule
package import NIOCore

extension BLIPConnectionEngine {
    /// The ERR reply sent for a request that grew past ``BLIPEngineConfiguration/maximumIncomingMessageSize``.
    static let tooLargeErrorCode = "413"

    /// Takes the next frame received (one WebSocket binary message).
    ///
    /// Throws a ``BLIPEngineError/Code/protocolViolation`` for everything go-blip or LiteCore treat as
    /// fatal (digest 7.12): bad varints, CRC, deflate or property data, a request number that is not the
    /// next one, a reply nobody awaits (BLIP 3; the older dialects ignore those at or below the last
    /// request number, as Cocoa does), too many messages in flight. The driver must then close.
    ///
    /// - Parameter now: the time the frame arrived, read only for an ACK (to measure the round trip).
    package func receive(
        _ frame: ByteBuffer,
        now: @autoclosure () -> NIODeadline
    ) throws(BLIPEngineError) -> BLIPReceiveResult {
        try self.checkUsable()
        let decoded: BLIPDecodedFrame
        do {
            decoded = try self.decoder.decode(frame)
        } catch {
            throw self.fail(BLIPEngineError(.protocolViolation, "\(error)", wireError: error))
        }
        switch decoded {
        case .unknownType, .malformedACK:
            return BLIPReceiveResult()  // ignored, as LiteCore and go-blip do
        case .ack(let ack):
            return self.receivedACK(ack, now: now())
        case .data(let data):
            return try self.receivedData(data)
        }
    }

    /// Records that `bytes` more body bytes of an incoming message were consumed, which lets ACKs go out.
    /// Only messages consumed manually need this (requests with ``BLIPEngineConfiguration/consumesRequestBodiesManually``,
    /// replies to requests that stream them); for others it does nothing.
    /// - Returns: whether an ACK became due.
    package func consumed(_ id: BLIPIncomingID, bytes: Int) -> Bool {
        guard !self.isClosed, let message = self.incoming[id], !message.consumesAutomatically,
            message.consume(bytes)
        else { return false }
        return self.queueACKIfDue(message)
    }

    /// The application refuses a message the peer is still sending (it is larger than the application
    /// can hold): the rest is drained unread, and a request gets ERR BLIP/413, as if it had passed
    /// ``BLIPEngineConfiguration/maximumIncomingMessageSize``. Does nothing for an unknown message.
    /// - Returns: whether the writer has something new to send (an early 413).
    package func refuse(_ id: BLIPIncomingID) throws(BLIPEngineError) -> Bool {
        guard !self.isClosed, let message = self.incoming[id], !message.isDiscarding else { return false }
        return try self.startDiscarding(message, tooLarge: true).wakeWriter
    }

    /// Nobody will read the rest of an incoming message (its reader went away): it is drained unread, and
    /// otherwise stays as it was (a request may still be answered).
    /// - Returns: whether an ACK became due.
    @discardableResult
    package func drain(_ id: BLIPIncomingID) -> Bool {
        guard !self.isClosed, let message = self.incoming[id], !message.isDiscarding else { return false }
        message.isDiscarding = true
        self.propertyBytesBuffered -= message.reader.bufferedBytes
        message.reader.cancel()
        message.unconsumedFrames.removeAll()
        message.bytesConsumable = message.bytesReceived
        return self.queueACKIfDue(message)
    }

    // MARK: - Data frames

    private func receivedData(_ frame: BLIPDataFrame) throws(BLIPEngineError) -> BLIPReceiveResult {
        let header = frame.header
        let id = BLIPIncomingID(isRequest: header.type == .request, number: header.messageNumber)
        let isLastFrame = !header.flags.contains(.moreComing)
        let message: IncomingMessageState
        if let existing = self.incoming[id] {
            message = existing
        } else {
            guard let admission = try self.admit(header, id: id) else { return BLIPReceiveResult() }
            if isLastFrame {
                return try self.receivedWholeMessage(frame, id: id, admission: admission)
            }
            guard self.incoming.count < self.configuration.maximumIncomingMessagesInFlight else {
                throw self.fail(
                    BLIPEngineError(
                        .tooManyMessagesInFlight,
                        "the peer has more than \(self.configuration.maximumIncomingMessagesInFlight) messages in flight"
                    )
                )
            }
            message = IncomingMessageState(
                id: id,
                type: header.type,
                flags: header.flags.subtracting(.moreComing),
                reader: self.makeReader(for: header),
                request: admission.request
            )
            message.consumesAutomatically = admission.consumesAutomatically
            self.incoming[id] = message
            if admission.discards {
                message.isDiscarding = true
                message.reader.cancel()
            }
        }

        message.bytesReceived += frame.bodyLength
        var event: BLIPEngineEvent?
        var wakeWriter = false
        if message.isDiscarding {
            // Drained unread: a gzip body is not inflated any further. A BLIP 3 frame still is (the deflate
            // stream is shared), so what counts is the larger of what came and what it inflated to. One
            // that keeps coming long past the size limit fails the connection.
            message.bytesDrained += max(frame.bodyLength, frame.payload.readableBytes)
            let limit = self.configuration.maximumIncomingMessageSize
            let past = message.isTooLarge ? message.bytesDrained : message.bytesDrained - limit
            guard past <= self.configuration.maximumDrainedBytes else {
                if id.isRequest && !message.flags.contains(.noReply) && !message.wasRefusedEarly {
                    // Its ERR BLIP/413 still goes out, ahead of the close: the request will never end now.
                    _ = try? self.refuseOversizedRequest(id.number, flags: message.flags)
                }
                let allowance = self.configuration.maximumDrainedBytes
                throw self.fail(
                    BLIPEngineError(
                        .messageTooLarge,
                        "\(id) went on for over \(allowance) bytes past the \(limit)-byte limit"
                    )
                )
            }
            message.bytesConsumable = message.bytesReceived
        } else {
            (event, wakeWriter) = try self.read(frame, into: message, isLastFrame: isLastFrame)
        }

        if isLastFrame {
            self.incoming.removeValue(forKey: id)
            if id.isRequest {
                // Refused (too large) gets ERR BLIP/413; merely drained (its reader went away) may still be
                // answered, and its reply, if already given, leaves now.
                let wake = try self.requestCompleted(
                    id.number,
                    discarded: message.isTooLarge,
                    refusedEarly: message.wasRefusedEarly,
                    flags: message.flags
                )
                wakeWriter = wakeWriter || wake
            }
        } else if self.dialect.hasFlowControl {
            wakeWriter = self.queueACKIfDue(message) || wakeWriter
        }
        return BLIPReceiveResult(event: event, wakeWriter: wakeWriter)
    }

    /// Reads a frame of a message that is being delivered: its body piece, and the event it makes.
    private func read(
        _ frame: BLIPDataFrame,
        into message: IncomingMessageState,
        isLastFrame: Bool
    ) throws(BLIPEngineError) -> (BLIPEngineEvent?, wakeWriter: Bool) {
        let piece: ByteBuffer
        let heldBefore = message.reader.bufferedBytes
        do {
            piece = try message.reader.append(frame.payload)
            if isLastFrame { try message.reader.finish() }
            self.propertyBytesBuffered += message.reader.bufferedBytes - heldBefore
        } catch let error where error.code == .bodyTooLarge(limit: message.reader.maximumBodySize) {
            // Inflation stopped at the limit: the message is refused, the connection stays.
            self.propertyBytesBuffered += message.reader.bufferedBytes - heldBefore
            message.bytesConsumable = message.bytesReceived
            return try self.startDiscarding(message, tooLarge: true)
        } catch {
            throw self.fail(BLIPEngineError(.protocolViolation, "\(message.id): \(error)", wireError: error))
        }
        guard message.bodyDelivered + piece.readableBytes <= self.configuration.maximumIncomingMessageSize else {
            message.bytesConsumable = message.bytesReceived
            return try self.startDiscarding(message, tooLarge: true)
        }
        message.bodyDelivered += piece.readableBytes
        if message.consumesAutomatically {
            message.bodyConsumed = message.bodyDelivered
            message.bytesConsumable = message.bytesReceived
        } else {
            message.unconsumedFrames.append((message.bytesReceived, message.bodyDelivered))
            _ = message.consume(0)
        }
        if !message.headDelivered, let properties = message.reader.properties {
            message.headDelivered = true
            let started = BLIPIncomingMessage(
                id: message.id,
                type: message.type,
                flags: message.flags,
                properties: properties,
                body: piece,
                isComplete: isLastFrame,
                request: message.request
            )
            return (.messageStarted(started), false)
        }
        if message.headDelivered && (piece.readableBytes > 0 || isLastFrame) {
            return (.bodyReceived(message.id, piece, isComplete: isLastFrame), false)
        }
        return (nil, false)
    }

    /// A message that fits one frame (most of them): no state is kept for it.
    private func receivedWholeMessage(
        _ frame: BLIPDataFrame,
        id: BLIPIncomingID,
        admission: Admission
    ) throws(BLIPEngineError) -> BLIPReceiveResult {
        var tooLarge = false
        var properties: BLIPProperties?
        var body = ByteBuffer()
        if !admission.discards {
            var reader = self.makeReader(for: frame.header)
            do {
                body = try reader.append(frame.payload)
                try reader.finish()
                properties = reader.properties
            } catch let error where error.code == .bodyTooLarge(limit: reader.maximumBodySize) {
                reader.cancel()
                tooLarge = true
            } catch {
                throw self.fail(BLIPEngineError(.protocolViolation, "\(id): \(error)", wireError: error))
            }
            tooLarge = tooLarge || body.readableBytes > self.configuration.maximumIncomingMessageSize
        }
        let flags = frame.header.flags
        var wakeWriter = false
        if id.isRequest {
            if tooLarge { self.dropUnanswered(id.number) }
            wakeWriter = try self.requestCompleted(id.number, discarded: tooLarge, refusedEarly: false, flags: flags)
        }
        // The event is made last, in the result: made before `requestCompleted`, it was copied into it.
        if tooLarge, let request = admission.request {
            let error = self.tooLargeError(id)
            return BLIPReceiveResult(event: .messageFailed(id, request: request, error), wakeWriter: wakeWriter)
        }
        guard !tooLarge, let properties else { return BLIPReceiveResult(wakeWriter: wakeWriter) }
        let message = BLIPIncomingMessage(
            id: id,
            type: frame.header.type,
            flags: flags,
            properties: properties,
            body: body,
            isComplete: true,
            request: admission.request
        )
        return BLIPReceiveResult(event: .messageStarted(message), wakeWriter: wakeWriter)
    }

    struct Admission {
        var request: BLIPOutgoingID?
        var discards = false
        var consumesAutomatically: Bool
    }

    /// Validates the first frame of a message and records it; nil means "ignore this frame".
    private func admit(_ header: BLIPFrameHeader, id: BLIPIncomingID) throws(BLIPEngineError) -> Admission? {
        if id.isRequest {
            // Requests must begin as 1, 2, 3 ... with no gap: anything else is fatal in LiteCore and go-blip.
            guard id.number == self.lastRequestNumberReceived + 1 else {
                let reason =
                    id.number <= self.lastRequestNumberReceived
                    ? "frame for finished request #\(id.number)"
                    : "request #\(id.number) is out of order (expected #\(self.lastRequestNumberReceived + 1))"
                throw self.fail(.violation(reason))
            }
            self.lastRequestNumberReceived = id.number
            if !header.flags.contains(.noReply) {
                self.unanswered[id.number] = UnansweredRequest(
                    isUrgent: header.flags.contains(.urgent),
                    isComplete: false
                )
            }
            return Admission(consumesAutomatically: !self.configuration.consumesRequestBodiesManually)
        }
        guard let pending = self.awaitingReply.removeValue(forKey: id.number) else {
            // LiteCore: fatal. Cocoa (seed, BLIP 2): ignored at or below the last request sent.
            if self.dialect != .blip3 && id.number <= self.lastRequestNumberSent { return nil }
            throw self.fail(.violation("reply #\(id.number) to no request awaiting one"))
        }
        return Admission(
            request: pending.request,
            discards: pending.isAbandoned,
            consumesAutomatically: !pending.streamsReply && !self.configuration.consumesReplyBodiesManually
        )
    }

    private func makeReader(for header: BLIPFrameHeader) -> BLIPMessageReader {
        self.decoder.makeMessageReader(
            for: header,
            maximumPropertiesSize: self.configuration.maximumPropertiesSize,
            maximumBodySize: self.configuration.maximumIncomingMessageSize
        )
    }

    private func tooLargeError(_ id: BLIPIncomingID) -> BLIPEngineError {
        BLIPEngineError(.messageTooLarge, "\(id) is larger than \(self.configuration.maximumIncomingMessageSize) bytes")
    }

    /// The message grew past the size limit, or the application refused it: drain the rest. A request can
    /// no longer be answered by the application: it gets ERR BLIP/413, once complete (or at once with
    /// ``BLIPEngineConfiguration/repliesEarlyToOversizedRequests``).
    private func startDiscarding(
        _ message: IncomingMessageState,
        tooLarge: Bool
    ) throws(BLIPEngineError) -> (BLIPEngineEvent?, wakeWriter: Bool) {
        message.isDiscarding = true
        message.isTooLarge = tooLarge
        self.propertyBytesBuffered -= message.reader.bufferedBytes
        message.reader.cancel()
        message.unconsumedFrames.removeAll()
        message.bytesConsumable = message.bytesReceived
        var wakeWriter = false
        if message.id.isRequest {
            self.dropUnanswered(message.id.number)
            if tooLarge && self.configuration.repliesEarlyToOversizedRequests && !message.flags.contains(.noReply) {
                message.wasRefusedEarly = true
                wakeWriter = try self.refuseOversizedRequest(message.id.number, flags: message.flags)
            }
        }
        // The application only hears of it if it knew the message, or awaits it as a reply.
        guard tooLarge, message.headDelivered || message.request != nil else { return (nil, wakeWriter) }
        return (.messageFailed(message.id, request: message.request, self.tooLargeError(message.id)), wakeWriter)
    }

    /// Forgets a request of the peer's that will not be answered by the application; a reply it had
    /// already given (held until the request was complete) is dropped.
    private func dropUnanswered(_ number: UInt64) {
        guard let held = self.unanswered.removeValue(forKey: number)?.heldReply else { return }
        self.outgoing.removeValue(forKey: held.id)
        self.forgetQueuedReplyBytes(of: held)
    }

    /// Queues ERR BLIP/413 for an oversized request.
    private func refuseOversizedRequest(_ number: UInt64, flags: BLIPFrameFlags) throws(BLIPEngineError) -> Bool {
        var properties = BLIPProperties()
        properties[BLIPProperties.errorDomainName] = "BLIP"
        properties[BLIPProperties.errorCodeName] = Self.tooLargeErrorCode
        self.unanswered[number] = UnansweredRequest(isUrgent: flags.contains(.urgent), isComplete: true)
        let reply = BLIPOutgoingMessage(
            .error(toRequest: number),
            properties: properties,
            body: .buffer(ByteBuffer(string: "message too large"))
        )
        return try self.enqueue(reply).wakeWriter
    }

    /// A request from the peer has arrived whole: its reply may now leave. One that was too large gets
    /// ERR BLIP/413 instead (unless it was no-reply, or was refused before it ended).
    private func requestCompleted(
        _ number: UInt64,
        discarded: Bool,
        refusedEarly: Bool,
        flags: BLIPFrameFlags
    ) throws(BLIPEngineError) -> Bool {
        if discarded {
            guard !flags.contains(.noReply), !refusedEarly else { return false }
            return try self.refuseOversizedRequest(number, flags: flags)
        }
        guard var request = self.unanswered[number] else { return false }
        request.isComplete = true
        guard let reply = request.heldReply else {
            self.unanswered[number] = request
            return false
        }
        self.unanswered.removeValue(forKey: number)
        reply.isHeld = false
        guard !reply.isStarved else { return false }
        self.queue(reply, isNew: true)
        return true
    }

    /// Queues an ACK when at least an ACK interval of consumed bytes has not been acknowledged. ACK
    /// values only grow, and a newer one replaces one still waiting to be written.
    private func queueACKIfDue(_ message: IncomingMessageState) -> Bool {
        guard self.dialect.hasFlowControl,
            message.bytesConsumable - message.bytesAcknowledged >= self.configuration.ackInterval
        else { return false }
        message.bytesAcknowledged = message.bytesConsumable
        let type: BLIPMessageType = message.id.isRequest ? .ackRequest : .ackResponse
        if let index = self.pendingACKs.firstIndex(where: { $0.type == type && $0.number == message.id.number }) {
            self.pendingACKs[index].count = message.bytesConsumable
            return false
        }
        self.pendingACKs.append((type, message.id.number, message.bytesConsumable))
        return true
    }
}
