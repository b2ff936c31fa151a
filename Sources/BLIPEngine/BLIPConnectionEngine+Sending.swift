internal import BLIPWire
internal import DequeModule
package import NIOCore

extension BLIPConnectionEngine {
    /// Queues a message to send. A request gets its number when its first frame leaves; a reply to a
    /// request that is still arriving waits until the request is complete (trap 17).
    ///
    /// - Returns: the message's handle, and whether the writer has something new to send.
    package func enqueue(_ message: BLIPOutgoingMessage) throws(BLIPEngineError) -> (
        id: BLIPOutgoingID, wakeWriter: Bool
    ) {
        try self.checkUsable()
        var flags: BLIPFrameFlags = []
        var number: UInt64 = 0
        var request: UnansweredRequest?
        switch message.kind {
        case .request:
            if message.isUrgent { flags.insert(.urgent) }
            if message.isNoReply { flags.insert(.noReply) }
        case .response(let requestNumber), .error(let requestNumber):
            guard let unanswered = self.unanswered[requestNumber], unanswered.heldReply == nil else {
                throw BLIPEngineError(
                    .unknownMessage,
                    "no request #\(requestNumber) from the peer awaits a reply (unknown, no-reply, or answered)"
                )
            }
            request = unanswered
            number = requestNumber
            if unanswered.isUrgent { flags.insert(.urgent) }
        }

        let data: BLIPMessageData
        var compressed: Bool
        do {
            switch message.body {
            case .buffer(let body):
                if let ahead = message.gzippedAhead, !self.dialect.compressesFrames {
                    (data, _) = try self.encoder.makeMessageData(
                        properties: message.properties,
                        body: body,
                        compressed: false
                    )
                    compressed = ahead.isCompressed
                    self.encoder.count(ahead, ahead: true)
                } else {
                    (data, compressed) = try self.encoder.makeMessageData(
                        properties: message.properties,
                        body: body,
                        compressed: message.isCompressed
                    )
                }
            case .streamed:
                var head = ByteBuffer()
                try self.encoder.writeProperties(message.properties, into: &head)
                data = BLIPMessageData(head)
                compressed = self.dialect.compressesFrames && message.isCompressed
                compressed = compressed && self.configuration.encoder.compressionLevel > 0
            }
        } catch {
            throw BLIPEngineError(.invalidMessage, "\(error)", wireError: error)
        }
        if compressed { flags.insert(.compressed) }

        let id = BLIPOutgoingID(rawValue: self.nextOutgoingID)
        self.nextOutgoingID += 1
        let dataBytes = data.readableBytes
        let state = OutgoingMessageState(
            id: id,
            type: message.type,
            number: number,
            flags: flags,
            data: consume data,  // moved: it was copied into the state, then destroyed here
            isBodyComplete: { if case .buffer = message.body { true } else { false } }(),
            isStreamed: { if case .streamed = message.body { true } else { false } }(),
            streamsReply: message.streamsReply && message.type == .request
        )
        self.outgoing[id] = state
        if state.type != .request { self.replyBytesQueued += dataBytes }

        if var request {
            if request.isComplete {
                self.unanswered.removeValue(forKey: number)
            } else {
                state.isHeld = true
                request.heldReply = state
                self.unanswered[number] = request
                return (id, false)
            }
        }
        guard !state.isStarved else { return (id, false) }
        self.queue(state, isNew: true)
        return (id, true)
    }

    /// Adds the next chunk of a streamed body.
    /// - Returns: whether the writer has something new to send.
    package func appendBody(
        _ id: BLIPOutgoingID,
        _ chunk: ByteBuffer,
        isComplete: Bool
    ) throws(BLIPEngineError) -> Bool {
        try self.checkUsable()
        guard let state = self.outgoing[id], state.isStreamed, !state.isBodyComplete else {
            throw BLIPEngineError(.unknownMessage, "\(id) is not a streamed message waiting for body")
        }
        let wasStarved = state.isStarved
        state.data.append(chunk)
        if state.type != .request && !state.hasStarted { self.replyBytesQueued += chunk.readableBytes }
        if isComplete { state.isBodyComplete = true }
        guard wasStarved, !state.isStarved, !state.isHeld, !state.isPaused, !state.isQueued else { return false }
        self.queue(state, isNew: !state.hasStarted)
        return true
    }

    /// Whether a streamed message wants more of its body: it is incomplete and has less than the low
    /// watermark queued.
    package func wantsBody(_ id: BLIPOutgoingID) -> Bool {
        guard let state = self.outgoing[id], state.isStreamed, !state.isBodyComplete else { return false }
        return state.data.readableBytes < self.configuration.streamedBodyLowWatermark
    }

    /// Cancels one of our messages. BLIP has no cancel frame: a message that has not started is removed
    /// (a reply's request may then be answered again); one that has started is still sent whole (the peer
    /// would otherwise hold a half message forever) and its reply dropped; a sent request's reply is
    /// dropped when it comes. A streamed body that cannot be finished after its message started throws
    /// ``BLIPEngineError/Code/bodyFailedMidMessage``: the connection must close.
    package func cancel(_ id: BLIPOutgoingID) throws(BLIPEngineError) -> BLIPCancelResult {
        guard !self.isClosed else { return .unknown }
        guard let state = self.outgoing[id] else {
            guard let number = self.awaitingReply.firstKey(where: { $0.request == id }) else { return .unknown }
            self.awaitingReply[number]!.isAbandoned = true
            return .replyAbandoned
        }
        if !state.hasStarted {
            if state.isQueued { self.outbox.remove(state) }
            self.outgoing.removeValue(forKey: id)
            self.forgetQueuedReplyBytes(of: state)
            if state.isHeld, var request = self.unanswered[state.number] {
                request.heldReply = nil  // the peer's request may be answered again
                self.unanswered[state.number] = request
            } else if state.type != .request {
                // A reply none of which left (a streamed body that failed at once): the peer's request
                // may be answered again, with ERR, so that it never waits forever.
                self.unanswered[state.number] = UnansweredRequest(isUrgent: state.isUrgent, isComplete: true)
            }
            return .removed
        }
        guard state.isBodyComplete else {
            throw self.fail(BLIPEngineError(.bodyFailedMidMessage, "\(id) stopped after its first frame was sent"))
        }
        state.isAbandoned = true
        if state.expectsReply, var pending = self.awaitingReply[state.number], pending.request == id {
            pending.isAbandoned = true
            self.awaitingReply[state.number] = pending
        }
        return .finishing
    }

    /// Appends the next frame to send to `output`: ACKs first, then one frame of the message at the head
    /// of the out-box. Call it whenever the transport can take a frame.
    ///
    /// - Parameter now: the time the frame leaves, for measuring round trips. Read only for a frame that
    ///   waits for an ACK (one with more to come, in a dialect with flow control): a small message leaves
    ///   without a clock read.
    /// Whether ``nextFrame(into:now:)`` would give a frame now: an ACK or a message is queued. A writer that
    /// has just pulled a frame stops when this is false, instead of pulling once more to find nothing; new
    /// work wakes it again (`wakeWriter`).
    package var hasFrameReady: Bool {
        !self.isClosed && (!self.hasFailed || self.isFinishingReplies)
            && (!self.pendingACKs.isEmpty || !self.outbox.isEmpty)
    }

    package func nextFrame(
        into output: inout ByteBuffer,
        now: @autoclosure () -> NIODeadline
    ) throws(BLIPEngineError) -> BLIPNextFrame {
        guard !self.isClosed, !self.hasFailed || self.isFinishingReplies else { return .idle }
        if let ack = self.pendingACKs.popFirst() {
            let start = output.writerIndex
            do {
                try self.encoder.encodeACK(
                    ack.type,
                    messageNumber: ack.number,
                    byteCount: UInt64(ack.count),
                    into: &output
                )
            } catch {
                throw self.fail(BLIPEngineError(.invalidMessage, "\(error)", wireError: error))
            }
            let header = BLIPFrameHeader(messageNumber: ack.number, type: ack.type, flags: [.urgent, .noReply])
            return .frame(
                BLIPSentFrame(
                    header: header,
                    length: output.writerIndex - start,
                    message: nil,
                    isFirstFrame: true,
                    isLastFrame: true
                )
            )
        }
        guard let state = self.outbox.popFirst() else { return .idle }
        state.isQueued = false

        let isFirstFrame = !state.hasStarted
        if isFirstFrame {
            if state.type == .request {
                // Numbered now, as LiteCore does, so that first frames always leave in number order; the
                // awaited reply is registered before this frame can reach the peer.
                guard self.lastRequestNumberSent < BLIPFrameHeader.maximumMessageNumber else {
                    throw self.fail(BLIPEngineError(.invalidMessage, "request numbers are exhausted (2^32-1)"))
                }
                self.lastRequestNumberSent += 1
                state.number = self.lastRequestNumberSent
                if state.expectsReply {
                    self.awaitingReply[state.number] = PendingReply(
                        request: state.id,
                        isAbandoned: state.isAbandoned,
                        streamsReply: state.streamsReply
                    )
                }
            }
        }

        // LiteCore's rule: a normal message gets a small frame while an urgent one waits behind it.
        let nextIsUrgent = self.outbox.first?.isUrgent ?? false
        let budget =
            state.isUrgent || !nextIsUrgent ? self.configuration.frameSize : self.configuration.smallFrameSize
        let encoded: BLIPEncodedFrame
        do {
            encoded = try self.encoder.encodeFrame(
                BLIPFrameHeader(messageNumber: state.number, type: state.type, flags: state.flags),
                data: &state.data,
                endOfMessage: state.isBodyComplete,
                maximumFrameSize: budget,
                into: &output
            )
        } catch {
            throw self.fail(BLIPEngineError(.invalidMessage, "\(error)", wireError: error))
        }
        if isFirstFrame && state.type != .request {
            self.replyBytesQueued -= state.data.readableBytes + encoded.dataBytesConsumed
        }
        state.framesSent += 1
        state.bytesSent += encoded.bodyLength
        let isLastFrame = !encoded.header.flags.contains(.moreComing)

        if isLastFrame {
            self.outgoing.removeValue(forKey: state.id)
            if !isFirstFrame { self.sending.removeValue(forKey: state.wireIdentity) }
            self.encoder.recycle(&state.data)
        } else {
            // Only a message with frames still to come can be ACKed, so only such a message is looked up
            // by its number: a one-frame message skips the dictionary.
            if isFirstFrame { self.sending[state.wireIdentity] = state }
            if self.dialect.hasFlowControl && !self.isFinishingReplies {
                state.unacknowledgedFrames.append((state.bytesSent, now()))
                if state.unacknowledgedBytes >= self.window.size {
                    state.isPaused = true
                    state.wasWindowLimited = true
                }
            }
            if !state.isPaused && !state.isStarved {
                self.queue(state, isNew: false)
            }
        }
        return .frame(
            BLIPSentFrame(
                header: encoded.header,
                length: encoded.frameLength,
                message: state.id,
                isFirstFrame: isFirstFrame,
                isLastFrame: isLastFrame,
                messageBytesSent: state.bytesSent
            )
        )
    }

    /// A reply leaves unsent: its data no longer counts as queued.
    func forgetQueuedReplyBytes(of state: OutgoingMessageState) {
        if state.type != .request && !state.hasStarted { self.replyBytesQueued -= state.data.readableBytes }
    }

    func queue(_ state: OutgoingMessageState, isNew: Bool) {
        state.isQueued = true
        self.outbox.push(state, isNew: isNew)
    }

    /// An ACK from the peer for one of our messages. Says whether a paused message resumed.
    func receivedACK(_ ack: BLIPACKFrame, now: NIODeadline) -> BLIPReceiveResult {
        let key = BLIPIncomingID(isRequest: ack.acknowledgedType == .request, number: ack.header.messageNumber)
        // ACKs for unknown or finished messages, and counts above what was sent, are ignored (LiteCore).
        guard let state = self.sending[key], ack.byteCount <= UInt64(state.bytesSent) else {
            return BLIPReceiveResult()
        }
        let count = Int(ack.byteCount)
        guard count > state.bytesAcknowledged else { return BLIPReceiveResult() }
        let newlyAcknowledged = count - state.bytesAcknowledged
        state.bytesAcknowledged = count
        var roundTrip: TimeAmount?
        while let first = state.unacknowledgedFrames.first, first.bytesSent <= count {
            roundTrip = now - first.time
            state.unacknowledgedFrames.removeFirst()
        }
        self.window.acknowledged(
            bytes: newlyAcknowledged,
            roundTrip: roundTrip,
            wasWindowLimited: state.wasWindowLimited,
            now: now
        )
        state.wasWindowLimited = state.isPaused
        let acknowledged = BLIPAcknowledgement(message: state.id, bytes: count)
        guard state.isPaused, state.unacknowledgedBytes < self.window.size else {
            return BLIPReceiveResult(acknowledged: acknowledged)
        }
        state.isPaused = false
        guard !state.isStarved, !state.isQueued else { return BLIPReceiveResult(acknowledged: acknowledged) }
        self.queue(state, isNew: false)
        return BLIPReceiveResult(wakeWriter: true, acknowledged: acknowledged)
    }
}

extension OutgoingMessageState {
    /// How the peer names this message in ACKs: requests and replies have separate number spaces.
    var wireIdentity: BLIPIncomingID {
        BLIPIncomingID(isRequest: self.type == .request, number: self.number)
    }
}
