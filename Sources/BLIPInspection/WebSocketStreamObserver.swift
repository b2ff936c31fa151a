internal import BLIPWebSocket
internal import NIOCore

/// Reads RFC 6455 frames out of one direction of a byte stream that it only watches: the proxy relays
/// the bytes unchanged and hands this a reference to them. NIOWebSocket's decoder is a pipeline handler
/// that consumes what it parses; this one unmasks into its own copies (never into the relayed bytes)
/// and reassembles fragmented messages up to a budget. When nothing reads binary messages (the proxy
/// relaying without decoding or capturing), it skips their payloads as they pass instead of gathering them.
struct WebSocketStreamObserver {
    enum Event {
        case message(ByteBuffer, isText: Bool)
        case ping(ByteBuffer)
        case pong(ByteBuffer)
        case close(code: UInt16?, reason: String)
    }

    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// The largest message (all its fragments) reassembled; beyond it the direction is given up.
    let maximumMessageSize: Int
    private var pending: ByteBuffer?
    private var message: ByteBuffer?
    private var messageIsText = false
    /// Whether binary messages are reported; when not, their frames are only counted past.
    let readsBinaryMessages: Bool
    /// Payload bytes of a skipped frame still to come.
    private var skipping = 0
    /// Inside a fragmented binary message that is being skipped.
    private var inSkippedMessage = false

    init(maximumMessageSize: Int, readsBinaryMessages: Bool = true) {
        self.maximumMessageSize = maximumMessageSize
        self.readsBinaryMessages = readsBinaryMessages
    }

    /// Bytes waiting for the rest of their frame, at most one frame header and ``maximumMessageSize``.
    var bufferedBytes: Int { (self.pending?.readableBytes ?? 0) + (self.message?.readableBytes ?? 0) }

    /// Parses what `bytes` completes, reporting each message and control frame in order. Frames that lie
    /// whole in `bytes` are read in place. Only a frame begun in an earlier chunk is copied together, and
    /// it takes only the bytes it lacks: the rest of its header first, then the rest of its payload, never
    /// a byte of the next frame (copying every chunk behind a partial frame cost following bulk traffic a
    /// copy of every byte).
    mutating func observe(_ bytes: ByteBuffer, _ report: (Event) -> Void) throws(Failure) {
        var input = bytes
        self.skipPayload(of: &input)
        while var pending = self.pending.take() {
            // First the rest of its header (its first two bytes say how long it is), never more.
            guard let header = try self.completedHeader(of: &pending, from: &input) else {
                self.pending = pending
                if input.readableBytes == 0 { return }
                continue  // the first two bytes are here now: they say how much more header to take
            }
            if try self.skips(header) {
                // Pending holds part of this frame and nothing after it: drop it, and the rest as it comes.
                self.skipping = header.frameSize - pending.readableBytes
                self.skipPayload(of: &input)
                continue
            }
            // Then the rest of its payload.
            let lacking = header.frameSize - pending.readableBytes
            if lacking > 0, let piece = input.readSlice(length: min(lacking, input.readableBytes)) {
                pending.writeImmutableBuffer(piece)
            }
            guard let frame = Self.frame(header, from: &pending) else {
                self.pending = pending  // all of the input went into it
                return
            }
            if pending.readableBytes > 0 { self.pending = pending }  // never so far: it held one frame
            try self.deliver(frame, report)
        }
        while let header = try Self.header(of: input, maximumPayload: self.maximumMessageSize) {
            if try self.skips(header) {
                self.skipping = header.frameSize
                self.skipPayload(of: &input)
                continue
            }
            guard let frame = Self.frame(header, from: &input) else { break }
            try self.deliver(frame, report)
        }
        if input.readableBytes > 0 { self.pending = input }
    }

    /// The header `pending` starts, once what it lacks of it (as far as its first two bytes tell) has been
    /// taken from the front of `input`; nil while it is still incomplete.
    private func completedHeader(of pending: inout ByteBuffer, from input: inout ByteBuffer) throws(Failure)
        -> Header?
    {
        if let header = try Self.header(of: pending, maximumPayload: self.maximumMessageSize) { return header }
        let lacking = Self.headerLength(of: pending) - pending.readableBytes
        if lacking > 0, let piece = input.readSlice(length: min(lacking, input.readableBytes)) {
            pending.writeImmutableBuffer(piece)
        }
        return try Self.header(of: pending, maximumPayload: self.maximumMessageSize)
    }

    /// Drops what is left of a skipped frame from the front of `input`.
    private mutating func skipPayload(of input: inout ByteBuffer) {
        let dropped = min(self.skipping, input.readableBytes)
        input.moveReaderIndex(forwardBy: dropped)
        self.skipping -= dropped
    }

    /// Whether the frame `header` starts is a binary one nobody reads; if so, it is begun (and checked as
    /// `deliver` would check it).
    private mutating func skips(_ header: Header) throws(Failure) -> Bool {
        guard !self.readsBinaryMessages else { return false }
        let fin = header.first & 0x80 != 0
        switch header.first & 0x0F {
        case 0x2:
            guard self.message == nil, !self.inSkippedMessage else {
                throw Failure(description: "a new message inside a fragmented one")
            }
            self.inSkippedMessage = !fin
            return true
        case 0x0 where self.inSkippedMessage:
            self.inSkippedMessage = !fin
            return true
        default:
            return false
        }
    }

    /// The length of the header that `buffer` starts, as far as its first two bytes tell (two until they
    /// are there).
    private static func headerLength(of buffer: ByteBuffer) -> Int {
        guard let second = buffer.getInteger(at: buffer.readerIndex + 1, as: UInt8.self) else { return 2 }
        let extended =
            switch second & 0x7F {
            case 126: 2
            case 127: 8
            default: 0
            }
        return 2 + extended + (second & 0x80 != 0 ? 4 : 0)
    }

    private struct Frame {
        var fin: Bool
        var opcode: UInt8
        var payload: ByteBuffer
    }

    private struct Header {
        var first: UInt8
        var key: (UInt8, UInt8, UInt8, UInt8)?
        var headerLength: Int
        var payloadLength: Int
        var frameSize: Int { self.headerLength + self.payloadLength }
    }

    /// The header at the start of `buffer`, or nil when it has not all arrived.
    private static func header(of buffer: ByteBuffer, maximumPayload: Int) throws(Failure) -> Header? {
        var view = buffer
        guard let first = view.readInteger(as: UInt8.self), let second = view.readInteger(as: UInt8.self) else {
            return nil
        }
        if first & 0x70 != 0 {
            throw Failure(description: "a frame with reserved bits set (an extension this proxy does not follow)")
        }
        var length = UInt64(second & 0x7F)
        if length == 126 {
            guard let extended = view.readInteger(as: UInt16.self) else { return nil }
            length = UInt64(extended)
        } else if length == 127 {
            guard let extended = view.readInteger(as: UInt64.self) else { return nil }
            length = extended
        }
        guard length <= UInt64(maximumPayload) else {
            throw Failure(description: "a WebSocket frame of \(length) bytes, over the \(maximumPayload)-byte budget")
        }
        var key: (UInt8, UInt8, UInt8, UInt8)?
        if second & 0x80 != 0 {
            guard let bytes = view.readBytes(length: 4) else { return nil }
            key = (bytes[0], bytes[1], bytes[2], bytes[3])
        }
        return Header(
            first: first,
            key: key,
            headerLength: view.readerIndex - buffer.readerIndex,
            payloadLength: Int(length)
        )
    }

    /// The frame `header` starts at the front of `buffer`, unmasked, or nil (with `buffer` untouched) when it
    /// has not all arrived.
    private static func frame(_ header: Header, from buffer: inout ByteBuffer) -> Frame? {
        guard buffer.readableBytes >= header.frameSize else { return nil }
        buffer.moveReaderIndex(forwardBy: header.headerLength)
        var payload = buffer.readSlice(length: header.payloadLength)!
        // A copy of our own: the relayed bytes may still be waiting in the other channel's outbound queue.
        if let key = header.key { payload.webSocketMaskWordWide(key) }
        return Frame(fin: header.first & 0x80 != 0, opcode: header.first & 0x0F, payload: payload)
    }

    private mutating func deliver(_ frame: Frame, _ report: (Event) -> Void) throws(Failure) {
        switch frame.opcode {
        case 0x8:
            var payload = frame.payload
            let code = payload.readInteger(as: UInt16.self)
            report(.close(code: code, reason: String(decoding: payload.readableBytesView, as: UTF8.self)))
        case 0x9:
            report(.ping(frame.payload))
        case 0xA:
            report(.pong(frame.payload))
        case 0x1, 0x2:
            guard self.message == nil, !self.inSkippedMessage else {
                throw Failure(description: "a new message inside a fragmented one")
            }
            if frame.fin {
                report(.message(frame.payload, isText: frame.opcode == 0x1))
            } else {
                self.message = frame.payload
                self.messageIsText = frame.opcode == 0x1
            }
        case 0x0:
            guard var message = self.message.take() else {
                throw Failure(description: "a continuation frame outside a fragmented message")
            }
            guard message.readableBytes + frame.payload.readableBytes <= self.maximumMessageSize else {
                throw Failure(description: "a fragmented message over the \(self.maximumMessageSize)-byte budget")
            }
            message.writeImmutableBuffer(frame.payload)
            if frame.fin {
                report(.message(message, isText: self.messageIsText))
            } else {
                self.message = message
            }
        default:
            throw Failure(description: "a frame with the unknown opcode \(frame.opcode)")
        }
    }
}
