internal import BLIP
internal import Logging
internal import NIOCore
internal import NIOWebSocket

/// Carries BLIP frames in WebSocket binary messages, on the channel's event loop: every received message
/// goes straight to the connection, and frames are pulled from it while the channel is writable, then
/// flushed once per batch (and early in a long read batch: ``firstEarlyWrite``). Answers pings, sends
/// heartbeat pings, and runs the close handshake with the code that says who was wrong (1000 normal, 1002
/// the peer broke the WebSocket or BLIP protocol, 1003 a text message, 1007 bad UTF-8, 1008 the peer
/// exceeded a limit, 1009 too large, 1011 our own failure; never 1005 or 1006).
///
/// It checks what NIO's frame decoder leaves to the application (RFC 6455 5-8): reserved bits and
/// opcodes, masking in each direction, fragmentation (it reassembles fragmented messages itself), UTF-8 in
/// text messages (fragment by fragment) and close reasons, close codes and one-byte close payloads.
/// Autobahn|Testsuite cases 1-7, 9 and 10 run against it in both roles (`.ci/autobahn.sh`).
///
/// It writes its frames itself: the header (and the client's word-wide masking) go straight into the
/// headroom left before each BLIP frame, so a frame is one buffer, and small frames that leave together
/// are gathered into one write (``batchedFrameLimit``). Where NIO's encoder is in the pipeline
/// (an upgrade by NIO's own upgraders, which BLIP's servers do not use: `BLIPServerUpgrader`), it hands that
/// encoder `WebSocketFrame`s instead.
final class BLIPWebSocketHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame

    enum Role: Sendable {
        case client
        case server
    }

    struct Settings: Sendable {
        var role: Role
        var heartbeatInterval: TimeAmount?
        var heartbeatTimeout: TimeAmount
        var closeTimeout: TimeAmount
        var frameSize: Int
        /// The largest message accepted, fragments reassembled (larger ones close the connection with 1009).
        var maximumMessageSize: Int
        var logger: Logger
    }

    /// Room kept before each BLIP frame for the WebSocket header (at most 14 bytes).
    static let headroom = 14
    /// Frame bytes one pump writes before it lets the event loop do other work.
    static let bytesPerTurn = 65_536
    /// Frames up to this size are gathered into one write; copying one costs less than writing it alone.
    static let batchedFrameLimit = 4_096
    /// Small messages of one read batch after which a connection writes what it has produced so far, before
    /// the batch ends; then again after every ``earlyWriteInterval`` more. With one write per read batch the
    /// two peers of a pipelined exchange take turns, each idle while the other works through a whole batch;
    /// written early, the first replies reach the peer while the rest are read, and both work at once
    /// (pipelined 64: 1.7x-2x the messages per second). Small numbers for the first write start the peer
    /// soonest; a larger interval after it keeps the writes per message down (sweep in Docs/BenchmarkLog.md).
    static let firstEarlyWrite = 4
    static let earlyWriteInterval = 16

    private let settings: Settings
    /// Where frames are written when capturing; nil costs one check per frame.
    private let capture: BLIPFrameCapture?
    private var context: ChannelHandlerContext?
    private var sink: (any FrameSink)?
    /// Messages that arrived before the connection started.
    private var early: [(ByteBuffer, isText: Bool)] = []
    /// The message being reassembled from fragments (unmasked), if one has begun.
    private var fragments: ByteBuffer?
    private var fragmentsAreText = false
    /// Checks a text message's fragments as they arrive.
    private var utf8 = UTF8Validator()
    private var sentClose = false
    private var receivedClose = false
    private var reportedClosed = false
    /// How the connection ended, kept for a connection that starts afterwards.
    private var closeStatus: BLIPCloseStatus?
    private var isPumping = false
    private var pumpAgain = false
    private var isPumpScheduled = false
    /// Small messages this read batch has still to deliver before its next early write.
    private var untilEarlyWrite = BLIPWebSocketHandler.firstEarlyWrite
    /// The sink's `writesWithinReadBatch`, read once at the start.
    private var writesEarly = false
    /// A frame buffer allocated but not used by the last pump (there was nothing to send), or emptied into
    /// the batch. It and `batch` are touched for every frame, only on the loop and never across a call out
    /// of the handler, so their accesses are not checked at run time (a check costs about 100 instructions).
    @exclusivity(unchecked) private var spareBuffer: ByteBuffer?
    /// Whether a frame-sized buffer is kept for the next pump (only by a connection that is writing).
    var holdsSpareBuffer: Bool { self.spareBuffer != nil }
    /// Small frames a pump has produced one after another, appended to the first one's buffer (which has
    /// room for a whole frame) and written as one: one write per batch instead of one per frame (NIO's
    /// bookkeeping of a write and its part of the flush cost about 3 000 instructions). Every other write
    /// writes it first, so that no frame overtakes it.
    @exclusivity(unchecked) private var batch: ByteBuffer?
    /// A close the connection asked for while a pump was running.
    private var closeAfterPump: BLIPCloseReason?
    private var awaitingPong = false
    /// The payload of the latest ping of the read batch, answered when the batch ends.
    private var pendingPong: ByteBuffer?
    /// Pongs written in this read batch (flushed when it ends).
    private var pongsThisBatch = 0
    /// Pings of one read batch answered one by one (Autobahn's cases send ten at once and expect ten pongs);
    /// past this, only the batch's latest ping is answered.
    static let pongsPerBatch = 16
    /// Frames of the current read batch, to find a peer flooding tiny frames.
    private var framesThisBatch = 0
    /// The channel's read options before a flood made them small (restored when it ends).
    private var unthrottled: (allocator: any RecvByteBufferAllocator, reads: UInt)?
    /// The connection paused reading: a pong may be waiting unread.
    private var readingPaused = false
    /// When the last read batch ended: anything received shows the peer alive, so the heartbeat pings only
    /// after ``Settings/heartbeatInterval`` of silence (as LiteCore does). Read once per batch.
    private var lastReceived = NIODeadline.now()
    /// When the ping that awaits its pong was sent.
    private var pingSent = NIODeadline.distantPast
    private var heartbeat: Scheduled<Void>?
    private var pongDeadline: Scheduled<Void>?
    private var closeDeadline: Scheduled<Void>?
    private var maskRandom = MaskKeyGenerator()
    /// NIO's frame encoder is in the pipeline: frames go to it as `WebSocketFrame`s.
    private var hasFrameEncoder = false

    init(settings: Settings, capture: BLIPFrameCapture? = nil) {
        self.settings = settings
        self.capture = capture
    }

    // MARK: - Transport operations (on the event loop)

    func start(_ sink: any FrameSink) {
        self.sink = sink
        self.writesEarly = sink.writesWithinReadBatch
        // Messages that came before the close frame are delivered even when both came before the start.
        let early = self.early
        self.early.removeAll()
        for (message, isText) in early { self.deliver(message, isText: isText) }
        if self.reportedClosed, let closeStatus = self.closeStatus {
            sink.closed(closeStatus)
            return
        }
        self.pump()
    }

    /// Writes frames while the channel takes them, up to `turnLimit` bytes, then yields to the loop. With
    /// `untilDone` it writes everything the connection has, writable or not (before a close frame: the
    /// connection bounds what it still has then).
    func pump(turnLimit: Int = BLIPWebSocketHandler.bytesPerTurn, untilDone: Bool = false) {
        guard !self.isPumping else {
            // Called back from inside a flush (the socket drained and turned writable again): the running
            // pump goes round once more rather than missing the wake-up.
            self.pumpAgain = true
            return
        }
        guard let context, let sink, !self.sentClose, !self.receivedClose else { return }
        self.isPumping = true
        self.pumpFrames(turnLimit: turnLimit, untilDone: untilDone, context: context, sink: sink)
        self.isPumping = false
        // A close the connection decided while this pump framed (an engine error): carried out now that the
        // frames produced before it are written. Not when a close is what asked for this pump: it follows.
        if !untilDone, let reason = self.closeAfterPump.take() { self.close(reason) }
    }

    private func pumpFrames(turnLimit: Int, untilDone: Bool, context: ChannelHandlerContext, sink: any FrameSink) {
        let channel = context.channel  // looked up once: each lookup goes through the pipeline
        repeat {
            self.pumpAgain = false
            var written = 0
            var frames = 0  // messages may be empty (the raw endpoints echo them): count them too
            var yielded = false
            while (channel.isWritable || untilDone) && !self.sentClose {
                if written >= turnLimit {
                    // Let the loop's other work run (reads, ACKs, the task about to queue an urgent request):
                    // a pump that ran until the window closed would hold all of it back.
                    yielded = true
                    break
                }
                var buffer =
                    self.spareBuffer.take()
                    ?? channel.allocator.buffer(capacity: self.settings.frameSize + Self.headroom)
                buffer.clear()
                buffer.moveWriterIndex(forwardBy: Self.headroom)
                buffer.moveReaderIndex(forwardBy: Self.headroom)
                guard let (kind, isLastReady) = sink.pullMessage(into: &buffer) else {
                    // Nothing to send. Kept for the next frame by a connection that is writing; an idle one
                    // (the start's pump, a wake that found nothing) holds no frame-sized buffer.
                    if frames > 0 { self.spareBuffer = buffer }
                    break
                }
                // The last one ready: no pull that finds nothing (new work wakes this pump again).
                let stopsAfterThis = isLastReady && !untilDone
                if let capture = self.capture {
                    capture.record(ByteBuffer(buffer.readableBytesView), clientToServer: self.settings.role == .client)
                }
                // Handed over, not copied: the client masks the payload in place, which must not trigger a
                // copy-on-write of the whole frame.
                written += buffer.readableBytes
                frames += 1
                let opcode: WebSocketOpcode = kind == .text ? .text : .binary
                self.writeFrame(opcode, consume buffer, context: context, allocator: channel.allocator)
                if stopsAfterThis { break }
            }
            self.writeBatch(context: context)
            if frames > 0 { context.flush() }
            if yielded {
                self.pumpLater(context: context)
                return
            }
        } while self.pumpAgain && !self.sentClose && !self.receivedClose
    }

    /// Writes one message's frame: through the frame encoder, or batched with the small frames before it
    /// into one buffer, or on its own.
    private func writeFrame(
        _ opcode: WebSocketOpcode,
        _ buffer: consuming ByteBuffer,
        context: ChannelHandlerContext,
        allocator: ByteBufferAllocator
    ) {
        guard !self.hasFrameEncoder else {
            self.write(opcode, consume buffer, context: context)
            return
        }
        var frame = self.frame(opcode, consume buffer, allocator: allocator)
        if frame.readableBytes <= Self.batchedFrameLimit, self.batch?.writableBytes ?? 0 >= frame.readableBytes {
            self.batch!.writeBuffer(&frame)
            self.spareBuffer = frame  // emptied, and still the only reference to its storage
            return
        }
        self.writeBatch(context: context)
        if frame.readableBytes <= Self.batchedFrameLimit {
            self.batch = frame
        } else {
            context.write(NIOAny(frame), promise: nil)
        }
    }

    /// The connection has something to send: pumps in a task of the event loop, after what is already
    /// queued there, so that everything produced in one turn of the loop leaves in one batch.
    func wake() {
        guard let context else { return }
        self.pumpLater(context: context)
    }

    /// Pumps again in a task of the event loop, after what is already queued there.
    private func pumpLater(context: ChannelHandlerContext) {
        guard !self.isPumpScheduled else { return }
        self.isPumpScheduled = true
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute {
            loopBound.value.isPumpScheduled = false
            loopBound.value.pump()
        }
    }

    func setReading(_ enabled: Bool) {
        self.readingPaused = !enabled
        guard let context else { return }
        context.channel.setOption(ChannelOptions.autoRead, value: enabled).whenComplete { _ in }
        if enabled { context.read() }
    }

    /// Starts the close handshake, after writing what the connection still has to send (replies to the
    /// peer's earlier requests, when the close is for a fatal error). The connection is reported closed at
    /// once: nothing more is read.
    func close(_ reason: BLIPCloseReason) {
        guard !self.isPumping else {
            // Decided while a pump framed: the frames it has produced go first (see pump).
            if self.closeAfterPump == nil { self.closeAfterPump = reason }
            return
        }
        if reason.finishesQueuedReplies {
            self.pump(turnLimit: .max, untilDone: true)  // nothing may be written after the close frame
        }
        self.closeAfterPump = nil  // one decided during that pump: this close, decided first, goes instead
        // The connection decided this close: it failed its requests with its own error already, if any.
        let code = WebSocketErrorCode(codeNumber: Int(reason.code.rawValue))
        self.startClose(code, reason: reason.reason, error: nil)
    }

    // MARK: - Channel events

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        self.hasFrameEncoder = (try? context.pipeline.syncOperations.handler(type: WebSocketFrameEncoder.self)) != nil
        if context.channel.isActive { self.startHeartbeat(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.stopTimers()
        self.context = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // The instance method, not the static one: only the protocol witness is specialized for the frame
        // type; the static extension method runs NIO's generic cast (about 800 instructions a frame more).
        let frame = self.unwrapInboundIn(data)
        self.framesThisBatch &+= 1
        guard !self.receivedClose else { return }  // nothing counts after the peer's close frame
        // No extension is negotiated, so no reserved bit may be set (RFC 6455 5.2), on any frame.
        guard frame.reservedBits.isEmpty else {
            return self.failProtocol(.protocolError, "reserved bits set")
        }
        // Clients mask every frame, servers none (RFC 6455 5.1): checked frame by frame, fragments too. A
        // server's payloads come unmasked from its decoder (UnmaskingFrameDecoder, which keeps the keys).
        switch (self.settings.role, frame.maskKey) {
        case (.server, nil): return self.failProtocol(.protocolError, "unmasked frame from a client")
        case (.client, .some): return self.failProtocol(.protocolError, "masked frame from a server")
        default: break
        }
        switch frame.opcode {
        case .continuation, .binary, .text:
            self.receivedData(frame)
        case .ping:
            // Each ping of a read batch is answered (written now, flushed when the batch ends), up to
            // pongsPerBatch; past that only the latest is, when the batch ends (RFC 6455 5.5.3 allows it):
            // a peer flooding pings costs a few writes and one flush per batch, not a write and a flush per ping.
            guard !self.sentClose else { return }
            if self.pongsThisBatch < Self.pongsPerBatch {
                self.pongsThisBatch += 1
                self.write(.pong, frame.data, context: context)
            } else {
                self.pendingPong = frame.data
            }
        case .pong:
            self.awaitingPong = false
            self.pongDeadline?.cancel()
            self.pongDeadline = nil
        case .connectionClose:
            self.receivedClose(frame)
        default:
            self.failProtocol(.protocolError, "reserved opcode \(frame.opcode)")
        }
    }

    /// A data frame: a whole message, or a fragment of one (RFC 6455 5.4), reassembled here rather than by
    /// NIO's aggregator so that every fragment is checked (reserved bits, mask, UTF-8 as it arrives) and a
    /// message may come in any number of fragments, as long as it fits ``Settings/maximumMessageSize``.
    private func receivedData(_ frame: WebSocketFrame) {
        guard !self.sentClose else { return }  // closing: the peer's data is dropped
        var payload = frame.data
        let isText: Bool
        var message: ByteBuffer
        if frame.opcode == .continuation {
            guard let started = self.fragments else {
                return self.failProtocol(.protocolError, "continuation frame with no message to continue")
            }
            self.fragments = nil  // appended to below without a copy
            isText = self.fragmentsAreText
            message = started
            guard payload.readableBytes <= self.settings.maximumMessageSize - message.readableBytes else {
                return self.failProtocol(
                    .messageTooLarge,
                    "message larger than \(self.settings.maximumMessageSize) bytes"
                )
            }
        } else {
            guard self.fragments == nil else {
                return self.failProtocol(.protocolError, "new message before the fragmented one ended")
            }
            isText = frame.opcode == .text
            if isText { self.utf8 = UTF8Validator() }
            message = ByteBuffer()
        }
        // Text is checked as it arrives: invalid UTF-8 fails the connection at once (RFC 6455 8.1).
        if isText {
            guard payload.withUnsafeReadableBytes({ self.utf8.feed($0) }), !frame.fin || self.utf8.isComplete else {
                return self.failProtocol(.dataInconsistentWithMessage, "text message is not UTF-8")
            }
        }
        if message.readableBytes == 0 {
            message = payload  // the first fragment, or a whole message: no copy
        } else {
            message.writeBuffer(&payload)
        }
        guard frame.fin else {
            self.fragments = message
            self.fragmentsAreText = isText
            return
        }
        if !isText { self.capture?.record(message, clientToServer: self.settings.role == .server) }
        if self.sink != nil {
            if self.deliver(message, isText: isText) { self.writeEarlyIfDue(after: message) }
        } else {
            self.early.append((message, isText))
        }
    }

    /// Hands a message to the sink; false if it refused it (the connection is then closing).
    @discardableResult
    private func deliver(_ message: ByteBuffer, isText: Bool) -> Bool {
        guard let sink else { return false }
        guard sink.received(message, isText: isText) else {
            self.startClose(
                .unacceptableData,
                reason: "text messages are not BLIP frames",
                error: BLIPConnectionError(.protocolViolation, "the peer sent a text WebSocket message")
            )
            return false
        }
        return true
    }

    /// Counts a message of this read batch towards the next early write (``firstEarlyWrite``). Messages held
    /// from before the start do not count: the start's own pump answers them, unless the channel has died.
    private func writeEarlyIfDue(after message: ByteBuffer) {
        // Small messages only: a batch of large ones is a few frames, whose ACKs keep their usual timing (the
        // adaptive send window reads round trips from them).
        guard self.writesEarly, message.readableBytes <= Self.batchedFrameLimit else { return }
        self.untilEarlyWrite -= 1
        if self.untilEarlyWrite == 0 {
            self.untilEarlyWrite = Self.earlyWriteInterval
            self.pump()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if self.heartbeat != nil { self.lastReceived = .now() }
        self.throttleFloods(context: context)
        if let pong = self.pendingPong.take(), !self.sentClose {
            self.write(.pong, pong, context: context)
        }
        if self.pongsThisBatch > 0 {
            self.pongsThisBatch = 0
            context.flush()
        }
        // Replies and ACKs that the reads produced (since the batch's last early write) go out in one
        // flush, after the tasks the reads woke (handlers answering, callers about to send) have run.
        self.untilEarlyWrite = Self.firstEarlyWrite
        self.pumpLater(context: context)
        context.fireChannelReadComplete()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let isWritable = context.channel.isWritable
        if isWritable { self.pumpLater(context: context) }
        // The connection stops reading requests while replies pile up for a peer that does not read them.
        self.sink?.writabilityChanged(isWritable)
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.stopTimers()
        self.capture?.flush()  // the connection's frames are all on disk once it has ended
        if !self.sentClose && !self.receivedClose {
            // TCP reset, EOF without a close frame, EOF mid-frame: the peer vanished (1006, never sent).
            let error = BLIPConnectionError(.transportFailed, "the connection was lost")
            self.reportClosed(
                BLIPCloseStatus(code: .abnormalClosure, reason: error.message, initiator: .transport, underlying: error)
            )
        } else {
            // Both close frames have crossed: the close was reported then, this never counts.
            self.reportClosed(BLIPCloseStatus(code: .normalClosure, initiator: .local))
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        switch error {
        case let error as NIOWebSocketError:
            // The decoder cannot go on (a frame over the limit, a fragmented or long control frame): nothing
            // more can be read, not even the peer's close frame, so the connection ends once ours is sent.
            self.failProtocol(
                error == .invalidFrameLength ? .messageTooLarge : .protocolError,
                "\(error)",
                thenCloseConnection: true
            )
        default:
            self.settings.logger.debug("transport error", metadata: ["blip.error": "\(error)"])
            let failure = BLIPConnectionError(.transportFailed, "\(error)", underlying: error)
            self.reportClosed(
                BLIPCloseStatus(code: .abnormalClosure, reason: "\(error)", initiator: .transport, underlying: failure)
            )
            context.close(promise: nil)
        }
    }

    // MARK: - Closing

    private func receivedClose(_ frame: WebSocketFrame) {
        guard !self.receivedClose else { return }  // a second close frame is tolerated
        // What the messages before the close produced (replies, echoes) goes out before the answering close.
        self.pump()
        self.receivedClose = true
        var data = frame.data
        var code = WebSocketErrorCode.normalClosure
        var reason = ""
        if data.readableBytes == 1 {
            return self.failProtocol(.protocolError, "one-byte close payload")
        } else if let received = data.readWebSocketErrorCode() {
            guard Self.isValidCloseCode(received) else {
                return self.failProtocol(.protocolError, "invalid close code \(UInt16(webSocketErrorCode: received))")
            }
            code = received
            guard data.withUnsafeReadableBytes(UTF8Validator.isValid) else {
                return self.failProtocol(.dataInconsistentWithMessage, "close reason is not UTF-8")
            }
            reason = String(buffer: data)
        }
        let number = UInt16(webSocketErrorCode: code)
        self.reportClosed(BLIPCloseStatus(code: BLIPCloseCode(rawValue: number), reason: reason, initiator: .peer))
        if !self.sentClose, let context {
            // Answer with the same code, then end the connection.
            self.sentClose = true
            var payload = context.channel.allocator.buffer(capacity: 2)
            payload.write(webSocketErrorCode: code)
            self.write(.connectionClose, payload, context: context)
            context.flush()
        }
        self.finishClose()
    }

    /// Sends a close frame with `code`, reports the connection closed, then waits (a little) for the
    /// peer's close frame, or with `thenCloseConnection` closes the TCP connection once the frame is out.
    private func startClose(
        _ code: WebSocketErrorCode,
        reason: String,
        error: (any Error)?,
        initiator: BLIPCloseStatus.Initiator = .local,
        thenCloseConnection: Bool = false
    ) {
        let status = BLIPCloseStatus(
            code: initiator == .transport
                ? .abnormalClosure : BLIPCloseCode(rawValue: UInt16(webSocketErrorCode: code)),
            reason: reason,
            initiator: initiator,
            underlying: error
        )
        guard !self.sentClose, let context, context.channel.isActive else {
            self.reportClosed(status)
            // A close already went out (one decided during the pump that ran first), but this one had to end
            // the connection: its peer's close frame cannot be read.
            if thenCloseConnection, let context { context.close(promise: nil) }
            return
        }
        self.sentClose = true
        // Report the reason before writing: a write error during the flush must not be reported first.
        self.reportClosed(status)
        var payload = context.channel.allocator.buffer(capacity: 2 + reason.utf8.count)
        payload.write(webSocketErrorCode: code)
        payload.writeString(String(reason.utf8.prefix(123)) ?? "")  // control frames carry at most 125 bytes
        if thenCloseConnection {
            self.stopTimers()
            let promise = context.eventLoop.makePromise(of: Void.self)
            self.write(.connectionClose, payload, context: context, promise: promise)
            context.flush()
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            promise.futureResult.whenComplete { _ in loopBound.value.close(promise: nil) }
            return
        }
        self.write(.connectionClose, payload, context: context)
        context.flush()
        if self.receivedClose {
            self.finishClose()
        } else {
            // Wait a little for the peer's close frame, then close regardless.
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            self.closeDeadline = context.eventLoop.scheduleTask(in: self.settings.closeTimeout) {
                loopBound.value.close(promise: nil)
            }
        }
    }

    /// Both close frames have crossed: the server closes TCP now; the client gives the server a moment.
    private func finishClose() {
        guard let context else { return }
        self.stopTimers()
        switch self.settings.role {
        case .server:
            context.close(promise: nil)
        case .client:
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            self.closeDeadline = context.eventLoop.scheduleTask(in: self.settings.closeTimeout) {
                loopBound.value.close(promise: nil)
            }
        }
    }

    /// Fails the connection (RFC 6455 7.1.7) for something the peer did wrong.
    private func failProtocol(_ code: WebSocketErrorCode, _ message: String, thenCloseConnection: Bool = false) {
        self.settings.logger.debug("WebSocket protocol error", metadata: ["blip.error": "\(message)"])
        self.fragments = nil
        // What earlier messages produced (replies, echoes) still goes out, before the close frame.
        self.pump()
        self.startClose(
            code,
            reason: message,
            error: BLIPConnectionError(code == .messageTooLarge ? .messageTooLarge : .protocolViolation, message),
            thenCloseConnection: thenCloseConnection
        )
    }

    private func reportClosed(_ status: BLIPCloseStatus) {
        guard !self.reportedClosed else { return }
        self.reportedClosed = true
        self.closeStatus = status
        self.sink?.closed(status)
    }

    /// Close codes a peer may send: 1000-1003 and 1007-1011 (RFC 6455 7.4), 1012-1014 (registered with
    /// IANA since: service restart, try again later, bad gateway) and 3000-4999.
    static func isValidCloseCode(_ code: WebSocketErrorCode) -> Bool {
        BLIPCloseCode(rawValue: UInt16(webSocketErrorCode: code)).isSendable
    }

    // MARK: - Floods

    /// Frames in one read batch past which the peer is flooding tiny frames (pings, empty messages): a batch
    /// of 64 KiB holds at most a few hundred BLIP frames of even the smallest messages.
    static let floodFrames = 1_024
    /// Reads of a flooding peer are this small, and one per readable event, so that its event loop's other
    /// connections (and the accept of new ones) run between its reads.
    static let throttledReadSize = 4_096

    /// While a peer floods, its reads are made small; when its batches are small again, as they were. A
    /// peer's tiny frames cost a frame's decoding each, so the bytes of one read bound what it can make its
    /// loop do before the others run: 4 peers flooding pings held new handshakes on that server for seconds.
    private func throttleFloods(context: ChannelHandlerContext) {
        let frames = self.framesThisBatch
        self.framesThisBatch = 0
        guard frames > Self.floodFrames || self.unthrottled != nil, let options = context.channel.syncOptions else {
            return
        }
        if self.unthrottled == nil, frames > Self.floodFrames,
            let allocator = try? options.getOption(.recvAllocator),
            let reads = try? options.getOption(.maxMessagesPerRead)
        {
            self.unthrottled = (allocator, reads)
            try? options.setOption(
                .recvAllocator,
                value: FixedSizeRecvByteBufferAllocator(capacity: Self.throttledReadSize)
            )
            try? options.setOption(.maxMessagesPerRead, value: 1)
            self.settings.logger.debug(
                "peer flooding tiny frames: reads throttled",
                metadata: ["blip.frames": "\(frames)"]
            )
        } else if let unthrottled = self.unthrottled, frames < Self.floodFrames / 16 {
            self.unthrottled = nil
            try? options.setOption(.recvAllocator, value: unthrottled.allocator)
            try? options.setOption(.maxMessagesPerRead, value: unthrottled.reads)
        }
    }

    // MARK: - Heartbeat

    private func startHeartbeat(context: ChannelHandlerContext) {
        guard let interval = self.settings.heartbeatInterval, interval > .zero, self.heartbeat == nil else { return }
        self.lastReceived = .now()
        self.scheduleHeartbeat(at: self.lastReceived + interval, context: context)
    }

    /// Checks for silence at `deadline`: one timer per connection, set again to when the silence would
    /// reach the interval, so that a dead peer is found within the interval and the pong timeout.
    private func scheduleHeartbeat(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        self.heartbeat = context.eventLoop.scheduleTask(deadline: deadline) { loopBound.value.heartbeatDue() }
    }

    private func heartbeatDue() {
        guard let context, let interval = self.settings.heartbeatInterval, !self.sentClose, !self.receivedClose else {
            return
        }
        let now = NIODeadline.now()
        if !self.awaitingPong && now - self.lastReceived >= interval {
            self.sendPing()
            self.scheduleHeartbeat(at: now + interval, context: context)
        } else {
            self.scheduleHeartbeat(at: max(self.lastReceived, now) + interval, context: context)
        }
    }

    private func sendPing() {
        guard let context, !self.sentClose, !self.receivedClose, !self.awaitingPong else { return }
        self.awaitingPong = true
        self.pingSent = .now()
        self.write(.ping, context.channel.allocator.buffer(string: "blip"), context: context)
        context.flush()
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        self.pongDeadline = context.eventLoop.scheduleTask(in: self.settings.heartbeatTimeout) {
            loopBound.value.heartbeatTimedOut()
        }
    }

    private func heartbeatTimedOut() {
        guard self.awaitingPong, let context else { return }
        if self.lastReceived > self.pingSent {
            // No pong yet, but the peer has sent something since the ping: it is alive.
            self.awaitingPong = false
            self.pongDeadline = nil
            return
        }
        if self.readingPaused && context.channel.isWritable {
            // Our ping went out, and the pong may be waiting behind what we are not reading yet (handlers
            // are behind): that is no sign of a dead peer. Look again after another timeout.
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            self.pongDeadline = context.eventLoop.scheduleTask(in: self.settings.heartbeatTimeout) {
                loopBound.value.heartbeatTimedOut()
            }
            return
        }
        self.settings.logger.debug("no pong in time: closing")
        self.startClose(
            .goingAway,
            reason: "no pong",
            error: BLIPConnectionError(.heartbeatTimedOut, "no pong within \(self.settings.heartbeatTimeout)"),
            initiator: .transport
        )
        context.close(promise: nil)
    }

    private func stopTimers() {
        self.heartbeat?.cancel()
        self.heartbeat = nil
        self.pongDeadline?.cancel()
        self.pongDeadline = nil
        self.closeDeadline?.cancel()
        self.closeDeadline = nil
    }

    // MARK: - Writing

    /// Writes the pump's batch of small frames, if it has one (not flushed).
    private func writeBatch(context: ChannelHandlerContext) {
        if let batch = self.batch.take() { context.write(NIOAny(batch), promise: nil) }
    }

    /// Writes one WebSocket frame holding the readable bytes of `payload` (not flushed), after the pump's
    /// batch.
    private func write(
        _ opcode: WebSocketOpcode,
        _ payload: consuming ByteBuffer,
        context: ChannelHandlerContext,
        promise: EventLoopPromise<Void>? = nil
    ) {
        if opcode == .connectionClose, let pong = self.pendingPong.take() {
            // A ping read before our close is answered before it (RFC 6455 5.5.2).
            self.write(.pong, pong, context: context)
        }
        self.writeBatch(context: context)
        guard !self.hasFrameEncoder else {
            let frame = WebSocketFrame(fin: true, opcode: opcode, data: payload)
            context.write(NIOAny(frame), promise: promise)
            return
        }
        context.write(NIOAny(self.frame(opcode, payload, allocator: context.channel.allocator)), promise: promise)
    }

    /// A whole frame in one buffer: header (and the client's mask key) in the headroom before the payload
    /// when there is room (there always is for BLIP frames); a client's payload masked eight bytes at a time.
    private func frame(
        _ opcode: WebSocketOpcode,
        _ payload: consuming ByteBuffer,
        allocator: ByteBufferAllocator
    ) -> ByteBuffer {
        let length = payload.readableBytes
        let extendedLength = length < 126 ? 0 : length <= 0xFFFF ? 2 : 8
        let key: (UInt8, UInt8, UInt8, UInt8)?
        switch self.settings.role {
        case .client:
            let clientKey = self.maskRandom.next()
            payload.webSocketMaskWordWide(clientKey)
            key = clientKey
        case .server:
            key = nil
        }
        let headerLength = 2 + extendedLength + (key == nil ? 0 : 4)
        let payloadStart = payload.readerIndex
        guard payloadStart >= headerLength else {
            var frame = allocator.buffer(capacity: headerLength + length)
            frame.writeRepeatingByte(0, count: headerLength)
            frame.setHeader(opcode: opcode, length: length, extendedLength: extendedLength, key: key)
            frame.writeBuffer(&payload)
            return frame
        }
        // The only reference to the storage, so the header goes in without a copy.
        payload.moveReaderIndex(to: payloadStart - headerLength)
        payload.setHeader(opcode: opcode, length: length, extendedLength: extendedLength, key: key)
        return payload
    }
}

extension ByteBuffer {
    /// Writes a final frame's header at the reader index, masked when there is a key.
    fileprivate mutating func setHeader(
        opcode: WebSocketOpcode,
        length: Int,
        extendedLength: Int,
        key: (UInt8, UInt8, UInt8, UInt8)?
    ) {
        // Stored through one pointer: each `setInteger` checks uniqueness and bounds and begins an access
        // of its own, about 170 instructions apiece, four times per masked frame.
        let maskBit: UInt8 = key == nil ? 0 : 0x80
        self.withUnsafeMutableReadableBytes { header in
            header[0] = 0x80 | opcode.networkRepresentation
            let index: Int
            switch extendedLength {
            case 0:
                header[1] = maskBit | UInt8(length)
                index = 2
            case 2:
                header[1] = maskBit | 126
                header.storeBytes(of: UInt16(length).bigEndian, toByteOffset: 2, as: UInt16.self)
                index = 4
            default:
                header[1] = maskBit | 127
                header.storeBytes(of: UInt64(length).bigEndian, toByteOffset: 2, as: UInt64.self)
                index = 10
            }
            if let key {
                header[index] = key.0
                header[index + 1] = key.1
                header[index + 2] = key.2
                header[index + 3] = key.3
            }
        }
    }
}

/// Masking keys from a fast generator seeded once from the system: a key per frame without a system call
/// per frame.
struct MaskKeyGenerator {
    private var state = UInt64.random(in: 1...UInt64.max)

    mutating func next() -> (UInt8, UInt8, UInt8, UInt8) {
        self.state ^= self.state >> 12
        self.state ^= self.state << 25
        self.state ^= self.state >> 27
        let value = UInt32(truncatingIfNeeded: (self.state &* 2_685_821_657_736_338_717) >> 32)
        return (
            UInt8(truncatingIfNeeded: value), UInt8(truncatingIfNeeded: value >> 8),
            UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 24)
        )
    }
}

extension WebSocketOpcode {
    /// The 4-bit wire value.
    var networkRepresentation: UInt8 {
        switch self {
        case .continuation: 0x0
        case .text: 0x1
        case .binary: 0x2
        case .connectionClose: 0x8
        case .ping: 0x9
        case .pong: 0xA
        default: 0x2
        }
    }
}
