internal import BLIPEngine
internal import BLIPWire
internal import DequeModule
internal import NIOCore

/// Fuzz target (b): the connection engine, driven by a script of API calls and frame deliveries against
/// a peer engine. The peer's frames are valid (right CRCs, right deflate state), so the script reaches
/// deep states; the script also damages, drops, duplicates and invents frames on their way in.
///
/// Invariants checked: no frame exceeds the frame budget; the engine accepts every frame our own engine
/// sends it undamaged; after a fatal error the engine refuses further work, and closing it reports every
/// request still waiting; the memory an incoming message holds stays within the peer's window plus a
/// frame.
enum EngineTarget {
    static let maximumSteps = 2_000

    static func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var input = FuzzInput(data)
        var session = EngineSession(input: &input)
        for _ in 0..<Self.maximumSteps where !input.isAtEnd && !session.isOver {
            try session.step(&input)
        }
        try session.finish()
    }
}

/// One scripted connection: `local` is the engine under test, `peer` the engine at the other end.
struct EngineSession {
    let dialect: BLIPDialect
    let local: BLIPConnectionEngine
    let peer: BLIPConnectionEngine
    var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
    /// Frames on their way in each direction.
    var toLocal: Deque<ByteBuffer> = []
    var toPeer: Deque<ByteBuffer> = []
    /// Frames to the local engine were damaged or invented: its errors are expected from then on.
    var inboundTampered = false
    /// The local engine failed (a fatal error on input): it must refuse everything but closing.
    var localFailed = false
    var isOver = false
    /// Our requests the local engine has queued and not seen answered.
    var localRequests: [BLIPOutgoingID] = []
    var streamedLocal: [BLIPOutgoingID] = []
    /// The peer's requests as the local engine saw them, to answer.
    var peerRequestNumbers: [UInt64] = []
    var localIncoming: [BLIPIncomingID] = []
    var peerRequestNumbersAtPeer: [UInt64] = []

    init(input: inout FuzzInput) {
        self.dialect = BLIPDialect.allCases[input.choice(BLIPDialect.allCases.count)]
        var local = BLIPEngineConfiguration(dialect: self.dialect)
        let options = input.byte()
        if options & 1 != 0 { local.sendWindow = .fixed(128_000) }
        if options & 2 != 0 { local.consumesRequestBodiesManually = true }
        if options & 4 != 0 { local.maximumIncomingMessageSize = 64 * 1024 }
        if options & 8 != 0 { local.maximumIncomingMessagesInFlight = 4 }
        if options & 16 != 0 { local.encoder.compressionLevel = 0 }
        if options & 32 != 0 { local.maximumPropertiesSize = 256 }
        // Otherwise the production limits (the engine's defaults are a connection's): bombs must be caught
        // by the limits users actually run with.
        self.local = BLIPConnectionEngine(configuration: local)
        self.peer = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: self.dialect))
    }

    mutating func step(_ input: inout FuzzInput) throws(FuzzFailure) {
        switch input.choice(16) {
        case 0, 1: try self.enqueueRequest(on: self.local, &input, isLocal: true)
        case 2: try self.enqueueRequest(on: self.peer, &input, isLocal: false)
        case 3: try self.answerAsLocal(&input)
        case 4: try self.answerAsPeer(&input)
        case 5, 6: try self.pump(self.local, into: \.toPeer, count: 1 + input.choice(8))
        case 7, 8: try self.pump(self.peer, into: \.toLocal, count: 1 + input.choice(8))
        case 9, 10: try self.deliverToLocal(count: 1 + input.choice(8))
        case 11: try self.deliverToPeer(count: 1 + input.choice(8))
        case 12: self.tamper(&input)
        case 13: try self.consumeOrCancel(&input)
        case 14: try self.appendStreamedBody(&input)
        default:
            self.now = self.now + .microseconds(Int64(input.uint16()) * 10)
            if input.byte() == 0xFF { try self.closeLocal() }
        }
    }

    // MARK: - API calls

    private mutating func enqueueRequest(
        on engine: BLIPConnectionEngine,
        _ input: inout FuzzInput,
        isLocal: Bool
    ) throws(FuzzFailure) {
        let flags = input.byte()
        let size = Int(input.uint16()) * (flags & 0x80 != 0 ? 16 : 1)
        let streamed = isLocal && flags & 0x40 != 0
        var properties: BLIPProperties = ["Profile": "p\(input.choice(4))"]
        if flags & 0x20 != 0 { properties["X-\(input.byte())"] = String(repeating: "v", count: 1 + input.choice(64)) }
        let message = BLIPOutgoingMessage(
            .request,
            properties: properties,
            body: streamed ? .streamed : .buffer(ByteBuffer(repeating: UInt8(truncatingIfNeeded: size), count: size)),
            urgent: flags & 1 != 0,
            compressed: flags & 2 != 0,
            noReply: flags & 4 != 0,
            streamsReply: flags & 8 != 0
        )
        let id: BLIPOutgoingID
        do {
            id = try engine.enqueue(message).id
        } catch {
            try self.expectRefusal(error, by: engine)
            return
        }
        guard isLocal else { return }
        if self.localFailed { throw FuzzFailure("a failed engine accepted a message") }
        if !message.isNoReply { self.localRequests.append(id) }
        if streamed { self.streamedLocal.append(id) }
    }

    private mutating func answerAsLocal(_ input: inout FuzzInput) throws(FuzzFailure) {
        guard !self.peerRequestNumbers.isEmpty else { return }
        let number = self.peerRequestNumbers.remove(at: input.choice(self.peerRequestNumbers.count))
        let kind: BLIPOutgoingMessage.Kind = input.bool() ? .response(toRequest: number) : .error(toRequest: number)
        let size = input.uint16()
        let message = BLIPOutgoingMessage(
            kind,
            properties: input.bool() ? ["Error-Code": "404"] : [:],
            body: .buffer(ByteBuffer(repeating: 0x61, count: size)),
            compressed: input.bool()
        )
        do {
            _ = try self.local.enqueue(message)
        } catch {
            // Answering a request twice, or one that expects no reply, is refused; so is any call after
            // a fatal error. None of it may crash.
            try self.expectRefusal(error, by: self.local, allowsUsageErrors: true)
        }
    }

    private mutating func answerAsPeer(_ input: inout FuzzInput) throws(FuzzFailure) {
        guard !self.peerRequestNumbersAtPeer.isEmpty else { return }
        let index = input.choice(self.peerRequestNumbersAtPeer.count)
        let number = self.peerRequestNumbersAtPeer.remove(at: index)
        let size = Int(input.uint16()) * (input.bool() ? 8 : 1)
        _ = try? self.peer.enqueue(
            BLIPOutgoingMessage(
                input.bool() ? .response(toRequest: number) : .error(toRequest: number),
                properties: [:],
                body: .buffer(ByteBuffer(repeating: 0x62, count: size)),
                compressed: input.bool()
            )
        )
    }

    private mutating func consumeOrCancel(_ input: inout FuzzInput) throws(FuzzFailure) {
        if input.bool(), !self.localIncoming.isEmpty {
            let id = self.localIncoming[input.choice(self.localIncoming.count)]
            _ = self.local.consumed(id, bytes: input.uint16() * 4)
        } else if !self.localRequests.isEmpty {
            let id = self.localRequests.remove(at: input.choice(self.localRequests.count))
            do {
                _ = try self.local.cancel(id)
            } catch  where error.code == .bodyFailedMidMessage {
                // A started streamed body that will never be finished: documented as fatal.
                self.localFailed = true
            } catch {
                try self.expectRefusal(error, by: self.local)
            }
        }
    }

    private mutating func appendStreamedBody(_ input: inout FuzzInput) throws(FuzzFailure) {
        guard !self.streamedLocal.isEmpty else { return }
        let index = input.choice(self.streamedLocal.count)
        let id = self.streamedLocal[index]
        let isComplete = input.bool()
        if isComplete { self.streamedLocal.remove(at: index) }
        let chunk = ByteBuffer(repeating: 0x63, count: input.uint16())
        do {
            _ = try self.local.appendBody(id, chunk, isComplete: isComplete)
        } catch {
            // A cancelled or finished message takes no more body.
            try self.expectRefusal(error, by: self.local, allowsUsageErrors: true)
        }
    }

    // MARK: - Frames

    private mutating func pump(
        _ engine: BLIPConnectionEngine,
        into queue: WritableKeyPath<EngineSession, Deque<ByteBuffer>>,
        count: Int
    ) throws(FuzzFailure) {
        for _ in 0..<count {
            var frame = ByteBuffer()
            let result: BLIPNextFrame
            do {
                result = try engine.nextFrame(into: &frame, now: self.now)
            } catch {
                try self.expectRefusal(error, by: engine)
                return
            }
            guard case .frame(let sent) = result else { return }
            guard frame.readableBytes == sent.length, sent.length <= engine.configuration.frameSize else {
                throw FuzzFailure("frame of \(frame.readableBytes) bytes (reported \(sent.length)) over the budget")
            }
            self[keyPath: queue].append(frame)
        }
    }

    private mutating func deliverToLocal(count: Int) throws(FuzzFailure) {
        for _ in 0..<count {
            guard let frame = self.toLocal.popFirst() else { return }
            let result: BLIPReceiveResult
            let inflatedBefore = self.local.bytesInflated
            do {
                result = try self.local.receive(frame, now: self.now)
            } catch {
                try self.checkInflation(since: inflatedBefore)
                guard self.localFailed || self.inboundTampered || self.localLimitsAreTight else {
                    throw FuzzFailure("the engine rejected an undamaged frame from our own engine: \(error)")
                }
                self.localFailed = true
                try self.closeLocal()
                return
            }
            try self.checkInflation(since: inflatedBefore)
            if let event = result.event { try self.recordLocal(event) }
        }
    }

    /// Bombs stop at the limits: one frame never inflates past the per-frame limit.
    private func checkInflation(since before: Int) throws(FuzzFailure) {
        let inflated = self.local.bytesInflated - before
        guard inflated <= self.local.configuration.decoder.maximumInflatedFrameSize + 1 else {
            throw FuzzFailure("one frame inflated \(inflated) bytes")
        }
    }

    private mutating func deliverToPeer(count: Int) throws(FuzzFailure) {
        for _ in 0..<count {
            guard let frame = self.toPeer.popFirst() else { return }
            let result: BLIPReceiveResult
            do {
                result = try self.peer.receive(frame, now: self.now)
            } catch {
                // Frames invented on the way in can look like requests the peer never sent; the local
                // engine rightly answers them and the peer rightly refuses the answers. Otherwise, the
                // engine under test sent something wrong.
                guard self.inboundTampered else {
                    throw FuzzFailure("our own engine rejected a frame the engine under test sent: \(error)")
                }
                try self.closeLocal()
                return
            }
            if case .messageStarted(let message)? = result.event, message.id.isRequest, message.expectsReply {
                self.peerRequestNumbersAtPeer.append(message.id.number)
            }
        }
    }

    /// The local engine's limits may legitimately refuse what the peer sends (too many messages in
    /// flight, properties too large).
    private var localLimitsAreTight: Bool {
        self.local.configuration.maximumIncomingMessagesInFlight < 1024
            || self.local.configuration.maximumPropertiesSize < BLIPPropertyCodec.defaultMaximumSize
            || self.local.configuration.maximumIncomingMessageSize
                < BLIPEngineConfiguration().maximumIncomingMessageSize
    }

    private mutating func recordLocal(_ event: BLIPEngineEvent) throws(FuzzFailure) {
        switch event {
        case .messageStarted(let message):
            if message.id.isRequest && message.expectsReply { self.peerRequestNumbers.append(message.id.number) }
            if !message.isComplete, self.localIncoming.count < 64 { self.localIncoming.append(message.id) }
        case .bodyReceived(let id, _, let isComplete):
            if isComplete { self.localIncoming.removeAll { $0 == id } }
        case .messageFailed(let id, _, _):
            self.localIncoming.removeAll { $0 == id }
        }
        guard self.dialect.hasFlowControl else { return }  // the seed dialect has no ACKs and no window
        // An honest peer keeps within its window. Frames duplicated or invented on the way in do not, and
        // then only the message size limit bounds what one message holds.
        let bound =
            (self.inboundTampered
                ? self.local.configuration.maximumIncomingMessageSize : self.peer.peakSendWindowSize)
            + self.peer.configuration.frameSize
        for id in self.localIncoming where self.local.unconsumedBytes(of: id) > bound {
            throw FuzzFailure("\(id) holds \(self.local.unconsumedBytes(of: id)) unconsumed bytes, above \(bound)")
        }
    }

    /// Damages the next frame on its way to the local engine, or invents one.
    private mutating func tamper(_ input: inout FuzzInput) {
        self.inboundTampered = true
        let action = input.choice(6)
        if action == 5 || self.toLocal.isEmpty {
            self.toLocal.append(ByteBuffer(bytes: input.record()))
            return
        }
        var frame = self.toLocal.removeFirst()
        switch action {
        case 0:
            let bit = input.uint16() % max(1, frame.readableBytes * 8)
            if let byte = frame.getInteger(at: frame.readerIndex + bit / 8, as: UInt8.self) {
                frame.setInteger(byte ^ (1 << UInt8(bit % 8)), at: frame.readerIndex + bit / 8)
            }
            self.toLocal.prepend(frame)
        case 1:
            frame.moveWriterIndex(to: frame.readerIndex + input.uint16() % max(1, frame.readableBytes))
            self.toLocal.prepend(frame)
        case 2:
            self.toLocal.prepend(frame)
            self.toLocal.prepend(frame)  // delivered twice
        case 3:
            break  // lost
        default:
            frame.writeBytes(input.bytes(input.choice(32)))
            self.toLocal.prepend(frame)
        }
    }

    // MARK: - Errors and closing

    /// Errors the engine may throw from an API call: it is closed or failed, or (when allowed) the call
    /// was a usage error. A failed engine must refuse; a healthy one must not fail on its own input.
    private func expectRefusal(
        _ error: BLIPEngineError,
        by engine: BLIPConnectionEngine,
        allowsUsageErrors: Bool = false
    ) throws(FuzzFailure) {
        if engine === self.local && self.localFailed { return }  // it refuses with the error that failed it
        switch error.code {
        case .closed, .protocolViolation, .tooManyMessagesInFlight:
            return
        case .unknownMessage, .noReplyExpected, .invalidMessage:
            if allowsUsageErrors || engine !== self.local { return }
            throw FuzzFailure("unexpected \(error)")
        case .messageTooLarge, .bodyFailedMidMessage:
            throw FuzzFailure("unexpected \(error) from an API call")
        }
    }

    private mutating func closeLocal() throws(FuzzFailure) {
        let waiting = Set(self.localRequests.filter { self.local.isAwaitingReply($0) })
        let closure = self.local.close()
        let failed = Set(closure.failedRequests)
        guard waiting.isSubset(of: failed) else {
            throw FuzzFailure("closing did not fail every waiting request: \(waiting.subtracting(failed))")
        }
        guard self.local.close().failedRequests.isEmpty else { throw FuzzFailure("close() is not idempotent") }
        var frame = ByteBuffer()
        if case .frame = (try? self.local.nextFrame(into: &frame, now: self.now)) ?? .idle {
            throw FuzzFailure("a closed engine produced a frame")
        }
        self.isOver = true
    }

    mutating func finish() throws(FuzzFailure) {
        if !self.isOver { try self.closeLocal() }
        _ = self.peer.close()
    }
}
