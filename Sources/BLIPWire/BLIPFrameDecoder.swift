package import NIOCore

/// A data frame (MSG, RPY or ERR) after decoding.
package struct BLIPDataFrame: Hashable, Sendable {
    package var header: BLIPFrameHeader
    /// This frame's slice of the message data: inflated in BLIP 3 if the frame was compressed; as sent
    /// (possibly a piece of a gzip body) in the older dialects.
    package var payload: ByteBuffer
    /// Bytes after the header, trailer included: what flow control counts and ACKs acknowledge.
    package var bodyLength: Int
    /// The frame's CRC-32 trailer (BLIP 3), already verified.
    package var checksum: UInt32?
}

/// An ACK frame: the peer has received `byteCount` bytes of one of our messages.
package struct BLIPACKFrame: Hashable, Sendable {
    package var header: BLIPFrameHeader
    package var byteCount: UInt64

    /// The type of our message being acknowledged: `.request` for ACKMSG, `.response` for ACKRPY
    /// (a response may be an RPY or an ERR).
    package var acknowledgedType: BLIPMessageType {
        self.header.type == .ackRequest ? .request : .response
    }
}

/// One decoded frame.
package enum BLIPDecodedFrame: Hashable, Sendable {
    case data(BLIPDataFrame)
    case ack(BLIPACKFrame)
    /// An ACK whose byte count does not decode. LiteCore and go-blip ignore these.
    case malformedACK(BLIPFrameHeader, BLIPWireError)
    /// A frame of a type the dialect does not define (3, 6, 7); to be ignored. Like LiteCore, the decoder
    /// does not run it through the checksum or the inflater.
    case unknownType(BLIPFrameHeader)
}

/// Turns the frames of one direction of one connection, in order, into headers and message data.
///
/// It owns that direction's state: the BLIP 3 running CRC-32 and raw-inflate stream, which carry from
/// frame to frame, and a pool of gzip inflaters for the older dialects' bodies. Any error it throws is
/// fatal for the connection: its state no longer matches the peer's. Not thread-safe.
///
/// Its stored properties skip Swift's run-time exclusivity checks, as the connection engine's (BLIPEngine) do, for the
/// same reason: it calls out to no other code, so no two accesses to its state can overlap.
package final class BLIPFrameDecoder {
    package struct Configuration: Hashable, Sendable {
        /// The most bytes one compressed frame may inflate to. LiteCore fills a frame until its
        /// *compressed* output nearly reaches 16 KiB, so one frame of text routinely inflates to 150 KB
        /// or more; 16 MiB covers any 16 KiB frame (deflate cannot exceed about 1:1032) while refusing
        /// bombs hidden in larger frames.
        package var maximumInflatedFrameSize = 16 << 20

        package init() {}
    }

    package let dialect: BLIPDialect
    package let configuration: Configuration
    /// Frames decoded so far in this direction; also the index reported in errors.
    @exclusivity(unchecked) package private(set) var framesDecoded = 0

    @exclusivity(unchecked) private var checksum = BLIPRunningChecksum()
    @exclusivity(unchecked) private var inflater: FrameInflater?
    @exclusivity(unchecked) private var inflateScratch = ByteBuffer()
    @exclusivity(unchecked) private var framesInflated = 0
    let gzipPool = GzipDecompressorPool()

    package init(dialect: BLIPDialect, configuration: Configuration = Configuration()) {
        self.dialect = dialect
        self.configuration = configuration
    }

    /// The running CRC-32 after the frames decoded so far (BLIP 3).
    package var checksumValue: UInt32 { self.checksum.value }

    /// Bytes produced by decompression so far: inflated frames (BLIP 3) and gzip bodies (the older
    /// dialects). What the limits on inflation keep bounded.
    package var bytesInflated: Int { self.framesInflated + self.gzipPool.bytesInflated }

    /// Decodes the next frame of the direction (one WebSocket binary message).
    package func decode(_ frame: ByteBuffer) throws(BLIPWireError) -> BLIPDecodedFrame {
        let index = self.framesDecoded
        self.framesDecoded += 1
        do throws(BLIPWireError) {
            return try self.decodeFrame(frame)
        } catch {
            var located = error
            located.frameIndex = index
            throw located
        }
    }

    private func decodeFrame(_ frame: ByteBuffer) throws(BLIPWireError) -> BLIPDecodedFrame {
        let (header, headerLength) = try frame.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
            try BLIPFrameHeader.read(from: bytes, dialect: self.dialect)
        }
        guard header.type.isDefined(in: self.dialect) else {
            return .unknownType(header)
        }
        if header.type.isACK {
            var body = frame
            body.moveReaderIndex(forwardBy: headerLength)
            do throws(BLIPWireError) {
                return .ack(BLIPACKFrame(header: header, byteCount: try body.readBLIPVarint()))
            } catch {
                return .malformedACK(header, error.shifted(by: headerLength))
            }
        }

        let trailerLength = self.dialect.trailerLength
        guard frame.readableBytes >= headerLength + trailerLength else {
            throw BLIPWireError(
                .frameTooShort(length: frame.readableBytes, minimum: headerLength + trailerLength),
                offset: headerLength
            )
        }
        let bodyLength = frame.readableBytes - headerLength
        var body = frame.getSlice(at: frame.readerIndex + headerLength, length: bodyLength - trailerLength)!
        guard self.dialect.hasChecksum else {
            return .data(BLIPDataFrame(header: header, payload: body, bodyLength: bodyLength, checksum: nil))
        }

        // BLIP 3: inflate if compressed (an empty compressed body skips the inflater: trap 10), then check
        // the running CRC over the uncompressed data.
        if header.flags.contains(.compressed) && body.readableBytes > 0 {
            body = try self.inflate(body, offset: headerLength)
        }
        self.checksum.update(body)
        let expected = frame.getInteger(at: frame.writerIndex - 4, as: UInt32.self)!
        guard expected == self.checksum.value else {
            throw BLIPWireError(
                .checksumMismatch(expected: expected, computed: self.checksum.value),
                offset: frame.readableBytes - 4
            )
        }
        return .data(BLIPDataFrame(header: header, payload: body, bodyLength: bodyLength, checksum: expected))
    }

    private func inflate(_ body: ByteBuffer, offset: Int) throws(BLIPWireError) -> ByteBuffer {
        let inflater: FrameInflater
        if let existing = self.inflater {
            inflater = existing
        } else {
            inflater = try FrameInflater()
            self.inflater = inflater
        }
        // Reuse one output buffer: clearing it allocates nothing once the previous payload is released.
        // One that a huge frame grew is let go rather than kept for the life of the connection.
        if self.inflateScratch.capacity > 1 << 20 {
            self.inflateScratch = ByteBuffer()
        }
        self.inflateScratch.clear()
        do throws(BLIPWireError) {
            try body.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
                try inflater.inflateFrame(
                    bytes,
                    limit: self.configuration.maximumInflatedFrameSize,
                    into: &self.inflateScratch
                )
            }
        } catch {
            throw error.shifted(by: offset)
        }
        self.framesInflated += self.inflateScratch.readableBytes
        return self.inflateScratch
    }

    /// A reader for a message whose first frame has `header`, sharing this direction's gzip inflaters.
    /// A gzip body stops inflating as soon as it passes `maximumBodySize`; one frame's piece of it may
    /// inflate to at most ``Configuration/maximumInflatedFrameSize``, as a BLIP 3 frame may.
    package func makeMessageReader(
        for header: BLIPFrameHeader,
        maximumPropertiesSize: Int = BLIPPropertyCodec.defaultMaximumSize,
        maximumBodySize: Int = .max
    ) -> BLIPMessageReader {
        BLIPMessageReader(
            dialect: self.dialect,
            bodyIsGzip: !self.dialect.compressesFrames && header.flags.contains(.compressed),
            maximumPropertiesSize: maximumPropertiesSize,
            maximumBodySize: maximumBodySize,
            maximumInflatedPieceSize: self.configuration.maximumInflatedFrameSize,
            gzipPool: self.gzipPool
        )
    }
}
