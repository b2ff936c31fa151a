internal import NIOCore

/// Reads RFC 6455 frames out of one direction of a byte stream that it only watches: the proxy relays
/// the bytes unchanged and hands this a reference to them. NIOWebSocket's decoder is a pipeline handler
/// that consumes what it parses; this one unmasks into its own copies (never into the relayed bytes)
/// and reassembles fragmented messages up to a budget.
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

    init(maximumMessageSize: Int) {
        self.maximumMessageSize = maximumMessageSize
    }

    /// Bytes waiting for the rest of their frame, at most one frame header and ``maximumMessageSize``.
    var bufferedBytes: Int { (self.pending?.readableBytes ?? 0) + (self.message?.readableBytes ?? 0) }

    /// Parses what `bytes` completes, reporting each message and control frame in order.
    mutating func observe(_ bytes: ByteBuffer, _ report: (Event) -> Void) throws(Failure) {
        if var pending = self.pending.take() {
            pending.writeImmutableBuffer(bytes)
            self.pending = pending
        } else {
            self.pending = bytes
        }
        while var buffer = self.pending.take() {
            let frame = try Self.nextFrame(&buffer, maximumPayload: self.maximumMessageSize)
            if buffer.readableBytes > 0 { self.pending = buffer }
            guard let frame else { return }
            try self.deliver(frame, report)
        }
    }

    private struct Frame {
        var fin: Bool
        var opcode: UInt8
        var payload: ByteBuffer
    }

    /// The next whole frame, unmasked, or nil (with `buffer` untouched) when it has not all arrived.
    private static func nextFrame(_ buffer: inout ByteBuffer, maximumPayload: Int) throws(Failure) -> Frame? {
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
        guard var payload = view.readSlice(length: Int(length)) else { return nil }
        // A copy of our own: the relayed bytes may still be waiting in the other channel's outbound queue.
        if let key { payload.webSocketMaskWordWide(key) }
        buffer = view
        return Frame(fin: first & 0x80 != 0, opcode: first & 0x0F, payload: payload)
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
            guard self.message == nil else { throw Failure(description: "a new message inside a fragmented one") }
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
