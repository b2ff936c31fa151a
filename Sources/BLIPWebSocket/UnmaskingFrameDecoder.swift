internal import NIOCore
internal import NIOWebSocket

/// A server's WebSocket frame decoder that unmasks each client frame's payload as it copies it out of the
/// read buffer, word-wide, in one pass: every server's decoder (``BLIPServerUpgrader``), so that the handler
/// reads payloads as they come.
///
/// NIO's `WebSocketFrameDecoder` hands out a slice of the read buffer, still masked; unmasking that slice
/// copied it first (the read buffer, and NIO's pool of receive buffers, share its storage), then XORed it:
/// two passes, 5 % and 3 % of a server's CPU under a bulk upload (perf, 256 MiB up). Unmasking in the read
/// buffer itself cannot avoid the copy either (it copies the whole rest of the buffer, for every frame, while
/// the pool and earlier frames hold it), so the copy is made once, unmasked on the way. The checks are NIO's:
/// a length over `maximumFrameSize` (`invalidFrameLength`), a fragmented control frame, a control frame over
/// 125 bytes, a 64-bit length with its top bit set.
struct UnmaskingFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = WebSocketFrame

    let maximumFrameSize: Int

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let header = try Self.header(at: buffer.readerIndex, in: buffer, maximumFrameSize: self.maximumFrameSize)
        else { return .needMoreData }
        guard buffer.readableBytes - header.size >= header.length else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: header.size)
        let payload: ByteBuffer
        if let key = header.maskKey {
            var unmasked = context.channel.allocator.buffer(capacity: header.length)
            _ = buffer.withUnsafeReadableBytes { bytes in
                unmasked.writeWithUnsafeMutableBytes(minimumWritableBytes: header.length) { destination in
                    WebSocketMasking.mask(
                        UnsafeRawBufferPointer(rebasing: bytes[..<header.length]),
                        into: destination,
                        key: (key[0], key[1], key[2], key[3])
                    )
                    return header.length
                }
            }
            buffer.moveReaderIndex(forwardBy: header.length)
            payload = unmasked
        } else {
            payload = buffer.readSlice(length: header.length)!  // refused by the handler: clients must mask
        }
        let frame = WebSocketFrame(
            fin: header.firstByte & 0x80 != 0,
            rsv1: header.firstByte & 0x40 != 0,
            rsv2: header.firstByte & 0x20 != 0,
            rsv3: header.firstByte & 0x10 != 0,
            opcode: WebSocketOpcode(encodedWebSocketOpcode: header.firstByte & 0x0F)!,
            maskKey: header.maskKey,
            data: payload
        )
        context.fireChannelRead(Self.wrapInboundOut(frame))
        return .continue
    }

    mutating func decodeLast(
        context: ChannelHandlerContext,
        buffer: inout ByteBuffer,
        seenEOF: Bool
    ) throws -> DecodingState {
        while try self.decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }

    struct Header {
        var firstByte: UInt8
        var length: Int
        var maskKey: WebSocketMaskingKey?
        /// Bytes of the header itself.
        var size: Int
    }

    /// The frame header at `index`, or nil until all of it has arrived; throws what NIO's decoder throws for
    /// a frame that may not be read on.
    static func header(at index: Int, in buffer: ByteBuffer, maximumFrameSize: Int) throws -> Header? {
        guard let firstByte = buffer.getInteger(at: index, as: UInt8.self),
            let secondByte = buffer.getInteger(at: index + 1, as: UInt8.self)
        else { return nil }
        var size = 2
        var length = Int(secondByte & 0x7F)
        if length == 126 {
            guard let word = buffer.getInteger(at: index + 2, as: UInt16.self) else { return nil }
            length = Int(word)
            size += 2
        } else if length == 127 {
            guard let word = buffer.getInteger(at: index + 2, as: UInt64.self) else { return nil }
            guard word <= UInt64(Int.max) else { throw NIOWebSocketError.invalidFrameLength }
            length = Int(word)
            size += 8
        }
        guard length <= maximumFrameSize else { throw NIOWebSocketError.invalidFrameLength }
        let isControlFrame = firstByte & 0x08 != 0
        if isControlFrame && firstByte & 0x80 == 0 { throw NIOWebSocketError.fragmentedControlFrame }
        if isControlFrame && length > 125 { throw NIOWebSocketError.multiByteControlFrameLength }
        var maskKey: WebSocketMaskingKey?
        if secondByte & 0x80 != 0 {
            // A view of the 4 bytes, not an array: no allocation per frame.
            guard let key = buffer.viewBytes(at: index + size, length: 4) else { return nil }
            maskKey = WebSocketMaskingKey(key)
            size += 4
        }
        return Header(firstByte: firstByte, length: length, maskKey: maskKey, size: size)
    }
}
