internal import BLIPWire
internal import DequeModule
public import NIOCore

extension BLIPConnectionEngine {
    /// The ERR reply sent for a request that grew past ``BLIPEngineConfiguration/maximumIncomingMessageSize``.
    static let tooLargeErrorCode = "413"

    /// Takes the next frame received (one WebSocket binary message).
    ///
    /// Throws a ``BLIPEngineError/Code/protocolViolation`` for everything go-blip or LiteCore treat as
    /// fatal (digest 7.12): bad varints, CRC, deflate or property data, a request number that is not the
    /// next one, a reply nobody awaits (BLIP 3; the older dialects ignore those at or below the last
    /// request number, as Cocoa does), too many messages in flight. The driver must then close.
    public func receive(_ frame: ByteBuffer, now: NIODeadline) throws(BLIPEngineError) -> BLIPReceiveResult {
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
            return BLIPReceiveResult(wakeWriter: self.receivedACK(ack, now: now))
        case .data(let data):
            return try self.receivedData(data)
        }
    }

    /// Records that `bytes` more body bytes of an incoming message were consumed, which lets ACKs go out.
    /// Only messages consumed manually need this (requests with ``BLIPEngineConfiguration/consumesRequestBodiesManually``,
    /// replies to requests that stream them); for others it does nothing.
    /// - Returns: whether an ACK became due.
    public func consumed(_ id: BLIPIncomingID, bytes: Int) -> Bool {
        guard !self.isClosed, let message = self.incoming[id], !message.consumesAutomatically,
            message.consume(bytes)
        else { return false }
        return self.queueACKIfDue(message)
    }

    // MARK: - Data frames

    private func receivedData(_ frame: BLIPDataFrame) throws(BLIPEngineError) -> BLIPReceiveResult {
        let header = frame.header
        let id = BLIPIncomingID(isRequest: header.type == .request, number: header.messageNumber)
        let message: IncomingMessageState
        if let existing = self.incoming[id] {
            message = existing
        } else {
            guard let started = try self.startIncoming(header, id: id) else { return BLIPReceiveResult() }
            message = started
        }

        let isLastFrame = !header.flags.contains(.moreComing)
        let piece: ByteBuffer
        do {
            piece = try message.reader.append(frame.payload)
            if isLastFrame { try message.reader.finish() }
        } catch {
            throw self.fail(BLIPEngineError(.protocolViolation, "\(id): \(error)", wireError: error))
        }
        message.bytesReceived += frame.bodyLength

        var event: BLIPEngineEvent?
        var wakeWriter = false
        if !message.isDiscarding
            && message.bodyDelivered + piece.readableBytes > self.configuration.maximumIncomingMessageSize
        {
            event = self.startDiscarding(message)
        }
        if message.isDiscarding {
            message.bodyDelivered += piece.readableBytes
            message.bodyConsumed = message.bodyDelivered
            message.bytesConsumable = message.bytesReceived
        } else {
            message.bodyDelivered += piece.readableBytes
            if !message.headDelivered, let properties = message.reader.properties {
                message.headDelivered = true
                event = .messageStarted(
                    BLIPIncomingMessage(
                        id: id,
                        type: message.type,
                        flags: message.flags,
                        properties: properties,
                        body: piece,
                        isComplete: isLastFrame,
                        request: message.request
                    )
                )
            } else if message.headDelivered && (piece.readableBytes > 0 || isLastFrame) {
                event = .bodyReceived(id, piece, isComplete: isLastFrame)
            }
            message.unconsumedFrames.append((message.bytesReceived, message.bodyDelivered))
            _ = message.consume(message.consumesAutomatically ? piece.readableBytes : 0)
        }

        if isLastFrame {
            self.incoming.removeValue(forKey: id)
            if id.isRequest { wakeWriter = try self.requestCompleted(message) }
        } else if self.dialect.hasFlowControl {
            wakeWriter = self.queueACKIfDue(message)
        }
        return BLIPReceiveResult(event: event, wakeWriter: wakeWriter)
    }

    /// Validates the first frame of a message; nil means "ignore this frame".
    private func startIncoming(
        _ header: BLIPFrameHeader,
        id: BLIPIncomingID
    ) throws(BLIPEngineError) -> IncomingMessageState? {
        var request: BLIPOutgoingID?
        var discards = false
        var consumesAutomatically = !self.configuration.consumesRequestBodiesManually
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
        } else {
            guard let pending = self.awaitingReply.removeValue(forKey: id.number) else {
                // LiteCore: fatal. Cocoa (seed, BLIP 2): ignored at or below the last request sent.
                if self.dialect != .blip3 && id.number <= self.lastRequestNumberSent { return nil }
                throw self.fail(.violation("reply #\(id.number) to no request awaiting one"))
            }
            request = pending.request
            discards = pending.isAbandoned
            consumesAutomatically = !pending.streamsReply
        }
        guard self.incoming.count < self.configuration.maximumIncomingMessagesInFlight else {
            throw self.fail(
                BLIPEngineError(
                    .tooManyMessagesInFlight,
                    "the peer has more than \(self.configuration.maximumIncomingMessagesInFlight) messages in flight"
                )
            )
        }
        let message = IncomingMessageState(
            id: id,
            type: header.type,
            flags: header.flags.subtracting(.moreComing),
            reader: self.decoder.makeMessageReader(
                for: header,
                maximumPropertiesSize: self.configuration.maximumPropertiesSize
            ),
            request: request
        )
        message.isDiscarding = discards
        message.consumesAutomatically = consumesAutomatically
        self.incoming[id] = message
        return message
    }

    /// The message grew past the size limit: drain the rest. A request can no longer be answered by the
    /// application: it gets ERR BLIP/413 once complete.
    private func startDiscarding(_ message: IncomingMessageState) -> BLIPEngineEvent? {
        message.isDiscarding = true
        message.unconsumedFrames.removeAll()
        if message.id.isRequest {
            self.unanswered.removeValue(forKey: message.id.number)
        }
        let error = BLIPEngineError(
            .messageTooLarge,
            "\(message.id) is larger than \(self.configuration.maximumIncomingMessageSize) bytes"
        )
        // The application only hears of it if it knew the message, or awaits it as a reply.
        guard message.headDelivered || message.request != nil else { return nil }
        return .messageFailed(message.id, request: message.request, error)
    }

    /// A request from the peer has arrived whole: its reply may now leave.
    private func requestCompleted(_ message: IncomingMessageState) throws(BLIPEngineError) -> Bool {
        let number = message.id.number
        if message.isDiscarding {
            guard !message.flags.contains(.noReply) else { return false }
            var properties = BLIPProperties()
            properties[BLIPProperties.errorDomainName] = "BLIP"
            properties[BLIPProperties.errorCodeName] = Self.tooLargeErrorCode
            self.unanswered[number] = UnansweredRequest(isUrgent: message.flags.contains(.urgent), isComplete: true)
            let reply = BLIPOutgoingMessage(
                .error(toRequest: number),
                properties: properties,
                body: .buffer(ByteBuffer(string: "message too large"))
            )
            return try self.enqueue(reply).wakeWriter
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
