package import NIOCore

/// What ``BLIPFrameEncoder/encodeFrame(_:data:endOfMessage:maximumFrameSize:into:)`` wrote.
package struct BLIPEncodedFrame: Hashable, Sendable {
    /// The header as written: more-coming set unless this was the message's last frame; in BLIP 3,
    /// compressed set only if this frame's data really went through the deflater.
    package var header: BLIPFrameHeader
    /// Bytes of message data taken from the front of the data buffer.
    package var dataBytesConsumed: Int
    /// The whole frame's length.
    package var frameLength: Int
    /// Bytes after the header, trailer included: the unit flow control counts and ACKs acknowledge.
    package var bodyLength: Int
}

/// Turns message data into frames for one direction of one connection, in send order.
///
/// It owns that direction's state: the BLIP 3 running CRC-32 and raw-deflate stream, or the reused gzip
/// stream of the older dialects. zlib streams are created on first use, so an idle connection holds none.
/// Not thread-safe: one encoder belongs to one writer.
///
/// Its stored properties skip Swift's run-time exclusivity checks, as the connection engine's (BLIPEngine) do, for the
/// same reason: it calls out to no other code, so no two accesses to its state can overlap.
package final class BLIPFrameEncoder {
    package struct Configuration: Hashable, Sendable {
        /// zlib level (1-9) for messages asking for compression; 0 turns compression off, and the
        /// compressed flag is then never sent (as LiteCore does at level 0).
        package var compressionLevel: Int32
        /// zlib memLevel of the BLIP 3 deflater; 9 is LiteCore's choice and gives its exact bytes.
        package var deflateMemoryLevel: Int32 = 9
        /// At level 6 (the default), set zlib's match parameters to good 8, lazy 128, nice 258, chain 48
        /// instead of level 6's 8, 16, 128, 128: on JSON documents (the bulk text workload) 4 % fewer bytes
        /// and faster, on prose and source code about 1 % more bytes and 30 % faster (measured with the
        /// system zlib). Off, the output is zlib's own level 6, byte for byte what LiteCore sends.
        package var tunesDeflateForSpeed = true
        /// Send data raw when compressing it would not pay: data that looks incompressible
        /// (``BLIPCompressibility``), and seed or BLIP 2 bodies whose gzip is not smaller.
        package var skipsIncompressibleData = true
        /// The most message data one compressed BLIP 3 frame may carry. A frame is filled until its
        /// compressed output nearly reaches the frame size (as LiteCore does), up to this much input.
        package var maximumDataPerCompressedFrame = 256 * 1024
        /// The largest property block this side will send.
        package var maximumPropertiesSize = BLIPPropertyCodec.defaultMaximumSize

        package init(dialect: BLIPDialect) {
            self.compressionLevel = dialect.defaultCompressionLevel
        }
    }

    /// Counters that make the compression decisions measurable.
    package struct Statistics: Hashable, Sendable {
        package var framesEncoded = 0
        package var ackFramesEncoded = 0
        /// BLIP 3 frames whose data went through the deflater.
        package var framesCompressed = 0
        /// Frames (BLIP 3) or bodies (seed, BLIP 2) that asked for compression but were sent raw because
        /// the data looked incompressible, or compressing did not make it smaller.
        package var compressionSkipped = 0
        /// Uncompressed bytes fed to compression, and the compressed bytes that came out.
        package var bytesBeforeCompression = 0
        package var bytesAfterCompression = 0
        /// Seed and BLIP 2 bodies that came gzipped ahead (``BLIPGzippedBody``), counted in the above too.
        package var bodiesGzippedAhead = 0
    }

    package let dialect: BLIPDialect
    package let configuration: Configuration
    @exclusivity(unchecked) package private(set) var statistics = Statistics()

    @exclusivity(unchecked) private var checksum = BLIPRunningChecksum()
    @exclusivity(unchecked) private var deflater: FrameDeflater?
    @exclusivity(unchecked) private var gzip: GzipBodyCompressor?
    /// Emptied buffers of small messages already framed, for the next messages' data: a buffer costs two
    /// allocations, a quarter of a small round trip's. Few and small, so that an idle connection keeps
    /// little (at most `maximumSpareBuffers` x `maximumSpareCapacity` bytes).
    @exclusivity(unchecked) private var spareBuffers: [ByteBuffer] = []
    static let maximumSpareBuffers = 4
    static let maximumSpareCapacity = 2048
    var spareBufferCount: Int { self.spareBuffers.count }

    package init(dialect: BLIPDialect, configuration: Configuration? = nil) {
        self.dialect = dialect
        self.configuration = configuration ?? Configuration(dialect: dialect)
    }

    /// The running CRC-32 after the frames encoded so far (BLIP 3).
    package var checksumValue: UInt32 { self.checksum.value }

    // MARK: - Message data

    /// Bodies up to this size are copied next to the property block; larger ones are framed in place.
    static let copiedBodyLimit = 4096
    /// An uncompressed body whose whole storage is at most this large is kept as it is until its message is
    /// framed, and the property block is encoded then too. Larger storage is not kept: a small body may be a
    /// slice of a large read buffer, which a queued reply would otherwise hold on to.
    static let deferredBodyStorageLimit = 1024
    private static let allocator = ByteBufferAllocator()

    /// At least the encoded size of `properties` in any dialect: a varint length, then each name and value
    /// with its terminator (a token takes fewer bytes than its string).
    static func propertiesSizeBound(_ properties: BLIPProperties) -> Int {
        var size = 10
        for property in properties { size += property.name.utf8.count + property.value.utf8.count + 2 }
        return size
    }

    /// A message's data stream (property block, then body), ready to be framed.
    ///
    /// In the seed and BLIP 2 dialects a compressed body is gzipped here, once; it is sent raw instead if
    /// the body is empty or (with ``Configuration/skipsIncompressibleData``) looks incompressible or does
    /// not get smaller. In BLIP 3 compression happens per frame. A large body is not copied, and neither is a
    /// small uncompressed message: its properties and body stay as they are until its frame is encoded, into
    /// which they are then written directly.
    ///
    /// - Returns: the data, and whether the message's frames carry the compressed flag.
    package func makeMessageData(
        properties: BLIPProperties,
        body: ByteBuffer,
        compressed: Bool
    ) throws(BLIPWireError) -> (data: BLIPMessageData, compressed: Bool) {
        let wantsCompression = compressed && self.configuration.compressionLevel > 0
        let gzips = !self.dialect.compressesFrames && wantsCompression
        if !wantsCompression && body.storageCapacity <= Self.deferredBodyStorageLimit {
            // Encoded when framed: a small message's block and body then go straight into its frame.
            let blockLength = try BLIPPropertyCodec.blockLength(
                of: properties,
                dialect: self.dialect,
                maximumSize: self.configuration.maximumPropertiesSize
            )
            // Made in the return: a local `data` was copied into the returned tuple.
            return (
                BLIPMessageData(properties: properties, blockLength: blockLength, dialect: self.dialect, body: body),
                false
            )
        }
        // Sized up front: a buffer that grows while it is written costs a copy and two more allocations.
        let propertiesSize = Self.propertiesSizeBound(properties)
        if !gzips && body.readableBytes > Self.copiedBodyLimit {
            var head = self.makeBuffer(capacity: propertiesSize)
            try self.writeProperties(properties, into: &head)
            var data = BLIPMessageData(ownedBuffer: head)
            data.append(body)
            return (data, self.dialect.compressesFrames && compressed && self.configuration.compressionLevel > 0)
        }
        var head = self.makeBuffer(capacity: propertiesSize + (gzips ? 64 : body.readableBytes))
        let flag = try self.writeMessageData(properties: properties, body: body, compressed: compressed, into: &head)
        return (BLIPMessageData(ownedBuffer: head), flag)
    }

    /// Gives back the data of a message whose frames have all been encoded: its buffer may hold the next
    /// message's data.
    package func recycle(_ data: inout BLIPMessageData) {
        guard self.spareBuffers.count < Self.maximumSpareBuffers, let buffer = data.takeDrainedBuffer(),
            buffer.capacity <= Self.maximumSpareCapacity
        else { return }
        self.spareBuffers.append(buffer)
    }

    private func makeBuffer(capacity: Int) -> ByteBuffer {
        guard var buffer = self.spareBuffers.popLast() else { return Self.allocator.buffer(capacity: capacity) }
        buffer.reserveCapacity(capacity)
        return buffer
    }

    /// Appends a message's data stream (property block, then body) to `data`; see
    /// ``makeMessageData(properties:body:compressed:)``.
    ///
    /// - Returns: whether the message's frames carry the compressed flag.
    package func writeMessageData(
        properties: BLIPProperties,
        body: ByteBuffer,
        compressed: Bool,
        into data: inout ByteBuffer
    ) throws(BLIPWireError) -> Bool {
        try self.writeProperties(properties, into: &data)
        let wantsCompression = compressed && self.configuration.compressionLevel > 0
        if self.dialect.compressesFrames || !wantsCompression || body.readableBytes == 0 {
            data.writeImmutableBuffer(body)
            return self.dialect.compressesFrames && wantsCompression
        }
        let outcome = try Self.writeGzipped(
            body,
            compressor: self.gzipCompressor(),
            skipsIncompressibleData: self.configuration.skipsIncompressibleData,
            into: &data
        )
        self.count(outcome)
        return outcome.isCompressed
    }

    /// What gzipping one seed or BLIP 2 body did, for ``Statistics``.
    package struct GzipOutcome: Hashable, Sendable {
        /// Whether the body went out as gzip (else raw).
        package var isCompressed = false
        /// Sent raw although compression was asked for.
        package var isSkipped = false
        package var bytesBeforeCompression = 0
        package var bytesAfterCompression = 0
    }

    /// Writes the gzip of `body` to `data`, or `body` itself when that would not pay (with
    /// `skipsIncompressibleData`: data that looks incompressible, or a gzip that is not smaller).
    static func writeGzipped(
        _ body: ByteBuffer,
        compressor: GzipBodyCompressor,
        skipsIncompressibleData skips: Bool,
        into data: inout ByteBuffer
    ) throws(BLIPWireError) -> GzipOutcome {
        try body.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
            var outcome = GzipOutcome()
            if skips && !BLIPCompressibility.isWorthCompressing(bytes) {
                outcome.isSkipped = true
                data.writeBytes(bytes)
                return outcome
            }
            let start = data.writerIndex
            try compressor.compress(bytes, into: &data)
            outcome.bytesBeforeCompression = bytes.count
            outcome.bytesAfterCompression = data.writerIndex - start
            guard outcome.bytesAfterCompression < bytes.count || !skips else {
                // Not smaller: send the body as it is (BLIP-Cpp 2017 did the same).
                outcome.isSkipped = true
                data.moveWriterIndex(to: start)
                data.writeBytes(bytes)
                return outcome
            }
            outcome.isCompressed = true
            return outcome
        }
    }

    /// Adds what a body's gzip did to ``statistics``; `ahead` for a body gzipped ahead (``BLIPGzippedBody``).
    package func count(_ outcome: GzipOutcome, ahead: Bool = false) {
        if ahead { self.statistics.bodiesGzippedAhead += 1 }
        if outcome.isSkipped { self.statistics.compressionSkipped += 1 }
        self.statistics.bytesBeforeCompression += outcome.bytesBeforeCompression
        self.statistics.bytesAfterCompression += outcome.bytesAfterCompression
    }

    /// Appends the length-prefixed property block, as this encoder's dialect and limits require.
    package func writeProperties(_ properties: BLIPProperties, into data: inout ByteBuffer) throws(BLIPWireError) {
        try BLIPPropertyCodec.write(
            properties,
            dialect: self.dialect,
            maximumSize: self.configuration.maximumPropertiesSize,
            to: &data
        )
    }

    // MARK: - Frames

    /// Encodes the next frame of a message, taking as much of `data` as fits in `maximumFrameSize`.
    ///
    /// - Parameters:
    ///   - header: number, type and the message's flags. More-coming is computed here; in BLIP 3 the
    ///     compressed flag asks for this frame to be deflated.
    ///   - data: the message data not yet framed; the bytes framed are consumed from its front.
    ///   - endOfMessage: whether `data` holds everything that is left of the message.
    ///   - maximumFrameSize: the whole frame's budget, header and trailer included.
    ///   - output: the frame is appended here.
    package func encodeFrame(
        _ header: BLIPFrameHeader,
        data: inout BLIPMessageData,
        endOfMessage: Bool,
        maximumFrameSize: Int,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) -> BLIPEncodedFrame {
        precondition(!header.type.isACK, "ACK frames are encoded with encodeACK")
        var header = header
        header.flags.insert(.moreComing)
        let frameStart = output.writerIndex
        let headerLength = try header.write(to: &output, dialect: self.dialect)
        let room = maximumFrameSize - headerLength - self.dialect.trailerLength
        precondition(room > 0, "frame size \(maximumFrameSize) leaves no room for data")

        let consumed: Int
        if self.dialect.compressesFrames && header.flags.contains(.compressed) && self.shouldDeflate(data, room: room) {
            consumed = try self.deflateFill(&data, room: room, into: &output)
        } else {
            if self.dialect.compressesFrames { header.flags.remove(.compressed) }
            if data.isWholeAndUnencoded && data.readableBytes <= room {
                // The whole of a small message: written and checksummed in one pass, no buffer of its own.
                let dataStart = output.writerIndex
                consumed = data.writeWhole(into: &output)
                if self.dialect.hasChecksum {
                    output.withUnsafeReadableBytes { bytes in
                        self.checksum.update(
                            UnsafeRawBufferPointer(rebasing: bytes[(dataStart - output.readerIndex)...])
                        )
                    }
                }
            } else {
                if data.isWholeAndUnencoded {
                    data.encodeProperties(into: self.makeBuffer(capacity: data.readableBytes))
                }
                consumed = self.copyData(&data, upTo: room, into: &output)
            }
        }
        if endOfMessage && data.readableBytes == 0 {
            header.flags.remove(.moreComing)
        }
        if self.dialect.hasChecksum {
            output.writeInteger(self.checksum.value)
        }
        // Rewrite the flags in place: clearing more-coming or compressed never changes their length.
        let flagsIndex = frameStart + BLIPVarint.encodedLength(of: header.messageNumber)
        output.setBLIPFlagsVarint(try header.wireFlags(in: self.dialect), at: flagsIndex)

        self.statistics.framesEncoded += 1
        let frameLength = output.writerIndex - frameStart
        assert(frameLength <= maximumFrameSize, "frame of \(frameLength) bytes exceeds \(maximumFrameSize)")
        return BLIPEncodedFrame(
            header: header,
            dataBytesConsumed: consumed,
            frameLength: frameLength,
            bodyLength: frameLength - headerLength
        )
    }

    /// Copies as much of `data` as fits in `room` to `output`, through the running checksum; returns the bytes.
    private func copyData(_ data: inout BLIPMessageData, upTo room: Int, into output: inout ByteBuffer) -> Int {
        let consumed = min(room, data.readableBytes)
        var left = consumed
        while left > 0 {
            let slice = data.readSlice(upTo: left)
            left -= slice.readableBytes
            if self.dialect.hasChecksum { self.checksum.update(slice) }
            output.writeImmutableBuffer(slice)
        }
        return consumed
    }

    /// Encodes the next frame of a message whose remaining data is one buffer; see
    /// ``encodeFrame(_:data:endOfMessage:maximumFrameSize:into:)``.
    package func encodeFrame(
        _ header: BLIPFrameHeader,
        data: inout ByteBuffer,
        endOfMessage: Bool,
        maximumFrameSize: Int,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) -> BLIPEncodedFrame {
        var messageData = BLIPMessageData(data)
        let encoded = try self.encodeFrame(
            header,
            data: &messageData,
            endOfMessage: endOfMessage,
            maximumFrameSize: maximumFrameSize,
            into: &output
        )
        data.moveReaderIndex(forwardBy: encoded.dataBytesConsumed)
        return encoded
    }

    /// Encodes an ACK frame: `byteCount` bytes of message `messageNumber` (request for `.ackRequest`,
    /// response for `.ackResponse`) have been received. ACKs carry no checksum and are never compressed.
    package func encodeACK(
        _ type: BLIPMessageType,
        messageNumber: UInt64,
        byteCount: UInt64,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) {
        precondition(type.isACK && self.dialect.hasFlowControl, "no \(type) frames in \(self.dialect)")
        let header = BLIPFrameHeader(messageNumber: messageNumber, type: type, flags: [.urgent, .noReply])
        try header.write(to: &output, dialect: self.dialect)
        output.writeBLIPVarint(byteCount)
        self.statistics.ackFramesEncoded += 1
    }

    // MARK: - BLIP 3 compression

    private func shouldDeflate(_ data: BLIPMessageData, room: Int) -> Bool {
        guard self.configuration.compressionLevel > 0, data.readableBytes > 0 else { return false }
        // A frame too small to hold even one chunk's worst-case output is sent raw: a compressed frame
        // must never have an empty body (trap 10).
        guard FrameDeflater.inputBound(forOutput: room + 4) > 0 else { return false }
        if self.configuration.skipsIncompressibleData {
            let sample = data.peekSlice(upTo: max(room, BLIPCompressibility.sampleSize))
            let worthIt = sample.withUnsafeReadableBytes { BLIPCompressibility.isWorthCompressing($0) }
            if !worthIt {
                self.statistics.compressionSkipped += 1
                return false
            }
        }
        return true
    }

    /// Feeds data through the deflater in sync-flushed chunks until the frame is nearly full; each chunk
    /// is small enough that even incompressible data fits the room left. Returns the bytes consumed.
    private func deflateFill(
        _ data: inout BLIPMessageData,
        room: Int,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) -> Int {
        let deflater = try self.frameDeflater()
        let capacity = room + 4  // the last sync flush's 4-byte trailer is dropped
        let bodyStart = output.writerIndex
        let limit = min(data.readableBytes, self.configuration.maximumDataPerCompressedFrame)
        var consumed = 0
        while consumed < limit {
            let available = capacity - (output.writerIndex - bodyStart)
            // Stop once a third of the frame is used: each further chunk would be smaller, and a small
            // sync-flushed chunk costs more bytes than a frame header does (64 MiB of JSON lines: 5.74 MB
            // in 982 frames, against 5.81 MB in 466 frames filled to three quarters).
            if consumed > 0 && available < capacity * 2 / 3 { break }
            let chunk = min(FrameDeflater.inputBound(forOutput: available), limit - consumed)
            guard chunk > 0 else { break }
            // A chunk may span several buffers; only its last piece is sync-flushed.
            var left = chunk
            while left > 0 {
                let slice = data.readSlice(upTo: left)
                left -= slice.readableBytes
                self.checksum.update(slice)
                try slice.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
                    try deflater.deflate(bytes, flushing: left == 0, into: &output)
                }
            }
            consumed += chunk
        }
        try FrameDeflater.stripSyncFlushTrailer(from: &output)
        let bodyLength = output.writerIndex - bodyStart
        guard bodyLength <= room, bodyLength > 0 else {
            throw BLIPWireError(.compressionUnavailable("deflate produced \(bodyLength) bytes for a room of \(room)"))
        }
        self.statistics.framesCompressed += 1
        self.statistics.bytesBeforeCompression += consumed
        self.statistics.bytesAfterCompression += bodyLength
        return consumed
    }

    private func frameDeflater() throws(BLIPWireError) -> FrameDeflater {
        if let deflater { return deflater }
        let created = try FrameDeflater(
            level: self.configuration.compressionLevel,
            memoryLevel: self.configuration.deflateMemoryLevel,
            tunedForSpeed: self.configuration.tunesDeflateForSpeed && self.configuration.compressionLevel == 6
        )
        self.deflater = created
        return created
    }

    private func gzipCompressor() throws(BLIPWireError) -> GzipBodyCompressor {
        if let gzip { return gzip }
        let created = try GzipBodyCompressor(level: self.configuration.compressionLevel)
        self.gzip = created
        return created
    }
}

extension ByteBuffer {
    /// Overwrites a flags varint in place. Flags values are at most 0xFF, so one or two bytes.
    fileprivate mutating func setBLIPFlagsVarint(_ value: UInt64, at index: Int) {
        precondition(value <= 0xFF)
        if value < 0x80 {
            self.setInteger(UInt8(value), at: index)
        } else {
            self.setMultipleIntegers(UInt8(truncatingIfNeeded: value) | 0x80, UInt8(value >> 7), at: index)
        }
    }
}
