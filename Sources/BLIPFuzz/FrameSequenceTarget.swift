internal import BLIPEngine
internal import BLIPWire
internal import NIOCore

/// Fuzz target (a): one direction of a connection's frames, in order, through a frame decoder and message
/// readers, as the engine uses them: the BLIP 3 running CRC and inflate stream carry from frame to frame,
/// and messages are assembled across frames (properties straddling frames, gzip bodies).
///
/// Input: a dialect byte, then frames, each a 16-bit little-endian length and that many bytes.
enum FrameSequenceTarget {
    /// Messages assembled at once, at most (a connection's own limit is higher; this keeps a run small).
    static let maximumOpenMessages = 256

    static func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var input = FuzzInput(data)
        let dialect = BLIPDialect.allCases[input.choice(BLIPDialect.allCases.count)]
        // The production limits: inflation per frame and message size as a connection has them.
        let limits = BLIPEngineConfiguration(dialect: dialect)
        let decoder = BLIPFrameDecoder(dialect: dialect, configuration: limits.decoder)
        var readers: [MessageKey: BLIPMessageReader] = [:]

        while !input.isAtEnd {
            let frame = ByteBuffer(bytes: input.record())
            let inflatedBefore = decoder.bytesInflated
            let goesOn = try Self.take(frame, decoder: decoder, readers: &readers, limits: limits)
            // Bombs stop at the limits: one frame never inflates past the per-frame limit.
            let inflated = decoder.bytesInflated - inflatedBefore
            guard inflated <= limits.decoder.maximumInflatedFrameSize + 1 else {
                throw FuzzFailure("one frame inflated \(inflated) bytes")
            }
            if !goesOn { return }
        }
    }

    /// Decodes one frame and feeds its message's reader; false once the direction cannot go on.
    private static func take(
        _ frame: ByteBuffer,
        decoder: BLIPFrameDecoder,
        readers: inout [MessageKey: BLIPMessageReader],
        limits: BLIPEngineConfiguration
    ) throws(FuzzFailure) -> Bool {
        let decoded: BLIPDecodedFrame
        do {
            decoded = try decoder.decode(frame)
        } catch {
            try Self.check(error, frameLength: frame.readableBytes)
            return false  // fatal for a connection: nothing after it counts
        }
        guard case .data(let dataFrame) = decoded else { return true }
        let key = MessageKey(dataFrame.header)
        var reader =
            readers.removeValue(forKey: key)
            ?? decoder.makeMessageReader(for: dataFrame.header, maximumBodySize: limits.maximumIncomingMessageSize)
        do {
            let piece = try reader.append(dataFrame.payload)
            guard
                piece.readableBytes <= dataFrame.payload.readableBytes || decoder.dialect != .blip3
                    || dataFrame.header.flags.contains(.compressed)
            else {
                throw FuzzFailure("an uncompressed BLIP 3 frame produced more body than it carried")
            }
            guard reader.bodyBytesRead <= limits.maximumIncomingMessageSize else {
                throw FuzzFailure("a body of \(reader.bodyBytesRead) bytes passed the limit")
            }
            if dataFrame.header.flags.contains(.moreComing) {
                guard readers.count < Self.maximumOpenMessages else { return false }
                readers[key] = reader
            } else {
                try reader.finish()
            }
        } catch let error as BLIPWireError {
            try Self.check(error, frameLength: frame.readableBytes)
            return false
        } catch let failure as FuzzFailure {
            throw failure
        } catch {
            throw FuzzFailure("untyped error \(error)")
        }
        return true
    }

    /// A decode error says where it happened; never before the start of what was decoded.
    private static func check(_ error: BLIPWireError, frameLength: Int) throws(FuzzFailure) {
        if let offset = error.offset, offset < 0 {
            throw FuzzFailure("negative error offset in a frame of \(frameLength) bytes: \(error)")
        }
    }
}

/// Requests and replies are numbered separately (ERR shares the reply's number space).
struct MessageKey: Hashable {
    var isRequest: Bool
    var number: UInt64

    init(_ header: BLIPFrameHeader) {
        self.isRequest = header.type == .request
        self.number = header.messageNumber
    }
}
