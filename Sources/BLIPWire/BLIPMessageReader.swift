package import NIOCore

/// Reassembles one message's data stream from its frames' payloads: the varint length and property block
/// (which may straddle frames), then the body, handed out piece by piece as frames arrive.
///
/// In the seed and BLIP 2 dialects a compressed message's body is one gzip stream, inflated here as it
/// arrives. Make readers with ``BLIPFrameDecoder/makeMessageReader(for:maximumPropertiesSize:maximumBodySize:)``.
package struct BLIPMessageReader {
    private enum State {
        case readingProperties
        case readingBody
        case finished
    }

    package let dialect: BLIPDialect
    package let maximumPropertiesSize: Int
    /// The most body bytes (after gzip inflation, in the older dialects) this message may have.
    package let maximumBodySize: Int
    /// The most one frame's piece of a gzip body may inflate to (decompression-bomb guard).
    package let maximumInflatedPieceSize: Int

    /// The properties, once the whole property block has arrived.
    package private(set) var properties: BLIPProperties?
    /// Body bytes handed out so far (inflated, if the body was gzip).
    package private(set) var bodyBytesRead = 0
    /// Message data bytes received so far (property block and body as framed).
    package private(set) var dataBytesReceived = 0

    private var state = State.readingProperties
    private var pending = ByteBuffer()
    private var gzip: GzipBodyDecompressor?
    private let gzipPool: GzipDecompressorPool?
    private let bodyIsGzip: Bool

    init(
        dialect: BLIPDialect,
        bodyIsGzip: Bool,
        maximumPropertiesSize: Int,
        maximumBodySize: Int,
        maximumInflatedPieceSize: Int,
        gzipPool: GzipDecompressorPool?
    ) {
        self.dialect = dialect
        self.bodyIsGzip = bodyIsGzip
        self.maximumPropertiesSize = maximumPropertiesSize
        self.maximumBodySize = maximumBodySize
        self.maximumInflatedPieceSize = maximumInflatedPieceSize
        self.gzipPool = gzipPool
    }

    /// Whether the body arrives as gzip (seed and BLIP 2 compressed messages).
    package var isBodyCompressed: Bool { self.bodyIsGzip }

    /// Bytes held while the property block is incomplete (it may straddle frames).
    package var bufferedBytes: Int { self.pending.readableBytes }

    /// Takes the next frame's payload and returns the body bytes it completes (possibly none).
    ///
    /// Uncompressed body bytes are returned as a slice of `payload`, without copying.
    package mutating func append(_ payload: ByteBuffer) throws(BLIPWireError) -> ByteBuffer {
        precondition(self.state != .finished, "append after finish")
        let offset = self.dataBytesReceived
        self.dataBytesReceived += payload.readableBytes
        var payload = payload
        if self.state == .readingProperties {
            guard try self.readProperties(from: &payload, payloadOffset: offset) else { return ByteBuffer() }
        }
        return try self.readBody(payload)
    }

    /// Marks the message complete (its last frame was appended); checks that nothing is left half-read.
    package mutating func finish() throws(BLIPWireError) {
        defer { self.releaseGzip() }
        guard self.state == .readingBody else {
            throw BLIPWireError(.messageEndsInsideProperties, offset: self.dataBytesReceived)
        }
        self.state = .finished
        if let gzip, !gzip.isFinished {
            throw BLIPWireError(
                .invalidGzipBody("body ends before the gzip stream does"),
                offset: self.dataBytesReceived
            )
        }
    }

    /// Gives the reader's gzip inflater back before the message is complete (the message was abandoned).
    package mutating func cancel() {
        self.state = .finished
        self.pending = ByteBuffer()
        self.releaseGzip()
    }

    // MARK: - Steps

    /// Returns true once the properties are complete; `payload` is left holding the body bytes.
    private mutating func readProperties(
        from payload: inout ByteBuffer,
        payloadOffset: Int
    ) throws(BLIPWireError) -> Bool {
        // Fast path: the whole block is in this payload (nearly always); no copy into `pending`.
        if self.pending.readableBytes == 0 {
            let complete: BLIPProperties?
            do throws(BLIPWireError) {
                complete = try self.readCompleteProperties(from: &payload)
            } catch {
                throw error.shifted(by: payloadOffset)
            }
            if let complete {
                self.properties = complete
                self.state = .readingBody
                return true
            }
        }
        // `pending` holds the message data from its first byte, so its offsets are the message's.
        self.pending.writeImmutableBuffer(payload)
        payload.moveReaderIndex(to: payload.writerIndex)
        guard let properties = try self.readCompleteProperties(from: &self.pending) else { return false }
        self.properties = properties
        self.state = .readingBody
        payload = self.pending
        self.pending = ByteBuffer()
        return true
    }

    /// Reads the length-prefixed block if `buffer` holds all of it; nil if more bytes are needed.
    private func readCompleteProperties(from buffer: inout ByteBuffer) throws(BLIPWireError) -> BLIPProperties? {
        let length: UInt64
        let prefixLength: Int
        do throws(BLIPWireError) {
            (length, prefixLength) = try buffer.peekBLIPVarint()
        } catch let error where error.code == .truncatedVarint {
            return nil
        }
        guard length <= UInt64(self.maximumPropertiesSize) else {
            throw BLIPWireError(.propertiesTooLarge(length: length, limit: self.maximumPropertiesSize), offset: 0)
        }
        guard buffer.readableBytes - prefixLength >= Int(length) else { return nil }
        // The prefix is read already: `BLIPPropertyCodec.read` would read it a second time.
        return try BLIPPropertyCodec.readBlock(
            from: &buffer,
            prefixLength: prefixLength,
            length: Int(length),
            dialect: self.dialect
        )
    }

    private mutating func readBody(_ payload: ByteBuffer) throws(BLIPWireError) -> ByteBuffer {
        guard payload.readableBytes > 0 else { return ByteBuffer() }
        let remainingAllowance = self.maximumBodySize - self.bodyBytesRead
        guard self.bodyIsGzip else {
            guard payload.readableBytes <= remainingAllowance else {
                throw BLIPWireError(.bodyTooLarge(limit: self.maximumBodySize), offset: self.dataBytesReceived)
            }
            self.bodyBytesRead += payload.readableBytes
            return payload
        }
        let gzip = try self.takeGzip()
        gzip.scratch.clear()
        // Inflation stops at whichever comes first: the body's allowance (the message is too large, which
        // the connection survives) or the piece limit (a bomb in one frame, which it does not).
        let limit = min(remainingAllowance, self.maximumInflatedPieceSize)
        do {
            try payload.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
                try gzip.decompress(bytes, limit: limit, into: &gzip.scratch)
            }
        } catch let error where error.code == .inflatedTooLarge(limit: limit) {
            self.gzipPool?.bytesInflated += gzip.scratch.readableBytes
            guard limit == remainingAllowance else {
                throw BLIPWireError(.inflatedTooLarge(limit: limit), offset: self.dataBytesReceived)
            }
            throw BLIPWireError(.bodyTooLarge(limit: self.maximumBodySize), offset: self.dataBytesReceived)
        }
        self.gzipPool?.bytesInflated += gzip.scratch.readableBytes
        self.bodyBytesRead += gzip.scratch.readableBytes
        return gzip.scratch
    }

    private mutating func takeGzip() throws(BLIPWireError) -> GzipBodyDecompressor {
        if let gzip { return gzip }
        let taken: GzipBodyDecompressor
        if let gzipPool { taken = try gzipPool.take() } else { taken = try GzipBodyDecompressor() }
        self.gzip = taken
        return taken
    }

    private mutating func releaseGzip() {
        if let gzip {
            self.gzipPool?.recycle(gzip)
            self.gzip = nil
        }
    }
}

/// Inflaters for the gzip bodies of the older dialects, kept for reuse: messages interleave, so each
/// compressed message being received needs its own stream, but streams are not created per message.
final class GzipDecompressorPool {
    private var idle: [GzipBodyDecompressor] = []
    /// Body bytes inflated by the readers sharing this pool.
    var bytesInflated = 0
    /// Idle inflaters kept; more are freed (each holds about 40 KB once used).
    private let maximumIdle = 4

    func take() throws(BLIPWireError) -> GzipBodyDecompressor {
        if let reused = self.idle.popLast() {
            reused.reset()
            return reused
        }
        return try GzipBodyDecompressor()
    }

    func recycle(_ decompressor: GzipBodyDecompressor) {
        if self.idle.count < self.maximumIdle {
            self.idle.append(decompressor)
        }
    }
}
