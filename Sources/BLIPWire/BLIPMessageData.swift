package import NIOCore

/// The part of a message's data stream (property block, then body) that has not been framed yet, as a
/// queue of buffers: a large body is framed straight from the caller's buffer, and a streamed body is
/// appended chunk by chunk as it is produced.
package struct BLIPMessageData: Sendable {
    private var head: ByteBuffer
    private var queued: [ByteBuffer] = []
    private var queuedStart = 0
    /// `head` is a buffer the encoder made for this message and nothing outside the engine has seen: once
    /// drained it may hold the next message's data (see ``takeDrainedBuffer()``).
    private var ownsHead = false
    /// A property block not encoded yet, which comes before `head` in the stream: the data of a small
    /// message is written straight into its frame, not copied into a buffer of its own first.
    private var unencoded: UnencodedProperties?
    /// Bytes not yet framed.
    package private(set) var readableBytes: Int

    private struct UnencodedProperties: Sendable {
        var properties: BLIPProperties
        /// The block's length without its varint prefix, from ``BLIPPropertyCodec/blockLength(of:dialect:maximumSize:)``.
        var blockLength: Int
        var dialect: BLIPDialect
    }

    package init() {
        self.head = ByteBuffer()
        self.readableBytes = 0
    }

    package init(_ buffer: ByteBuffer) {
        self.head = buffer
        self.readableBytes = buffer.readableBytes
    }

    /// Data in a buffer the encoder allocated and filled itself.
    init(ownedBuffer buffer: ByteBuffer) {
        self.init(buffer)
        self.ownsHead = true
    }

    /// The block of `properties`, checked already (`blockLength` is its length without the prefix), then
    /// `body`; the block is encoded when the data is framed.
    init(properties: BLIPProperties, blockLength: Int, dialect: BLIPDialect, body: ByteBuffer) {
        // Each field set here, not through `init(_:)`: delegating made a copy of the whole value.
        self.head = body
        self.unencoded = UnencodedProperties(properties: properties, blockLength: blockLength, dialect: dialect)
        self.readableBytes = body.readableBytes + BLIPVarint.encodedLength(of: UInt64(blockLength)) + blockLength
    }

    /// Whether all of the data is an unencoded property block and one body buffer, so that
    /// ``writeWhole(into:)`` applies.
    var isWholeAndUnencoded: Bool { self.unencoded != nil }

    /// Writes the whole data (property block, then body) at the writer index of `output` in one pass, and
    /// leaves the data empty; returns the bytes written.
    mutating func writeWhole(into output: inout ByteBuffer) -> Int {
        guard let unencoded = self.unencoded.take() else {
            preconditionFailure("writeWhole(into:) needs data whose property block is not encoded yet")
        }
        let total = self.readableBytes
        let body = self.head
        output.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { target in
            let blockEnd = BLIPPropertyCodec.encode(
                unencoded.properties,
                blockLength: unencoded.blockLength,
                dialect: unencoded.dialect,
                into: target
            )
            body.withUnsafeReadableBytes { bytes in
                UnsafeMutableRawBufferPointer(rebasing: target[blockEnd..<total]).copyMemory(from: bytes)
            }
            return total
        }
        self.head = ByteBuffer()
        self.readableBytes = 0
        return total
    }

    /// Encodes a pending property block, and copies the body after it, into `buffer` (empty, made for this
    /// data), for the paths that take the data piece by piece.
    mutating func encodeProperties(into buffer: consuming ByteBuffer = ByteBuffer()) {
        guard self.unencoded != nil else { return }
        var buffer = buffer
        _ = self.writeWhole(into: &buffer)
        self = BLIPMessageData(ownedBuffer: buffer)
    }

    /// The emptied buffer that held this data, if the encoder made it, all of it has been framed, and no
    /// other reference to it is left; the data is left empty.
    ///
    /// Only such a buffer is reused: its references were all made and dropped by the engine's one
    /// writer, so "uniquely owned" cannot be a stale answer about a reference another thread just
    /// dropped (a buffer from a caller could be).
    mutating func takeDrainedBuffer() -> ByteBuffer? {
        guard self.ownsHead, self.readableBytes == 0, self.queued.isEmpty else { return nil }
        var buffer = self.head
        self.head = ByteBuffer()
        self.ownsHead = false
        return buffer.modifyIfUniquelyOwned { $0.clear() } == nil ? nil : buffer
    }

    /// Appends bytes at the end of the stream (no copy).
    package mutating func append(_ buffer: ByteBuffer) {
        guard buffer.readableBytes > 0 else { return }
        self.encodeProperties()
        self.readableBytes += buffer.readableBytes
        if self.head.readableBytes == 0 && self.queuedStart == self.queued.count {
            self.head = buffer
            self.ownsHead = false
        } else {
            self.queued.append(buffer)
        }
    }

    /// The next contiguous piece of the stream, at most `maximum` bytes, consumed.
    mutating func readSlice(upTo maximum: Int) -> ByteBuffer {
        self.encodeProperties()
        self.promoteIfHeadIsEmpty()
        let length = min(maximum, self.head.readableBytes)
        let slice = self.head.readSlice(length: length)!
        self.readableBytes -= length
        return slice
    }

    /// The first contiguous bytes of the stream, at most `maximum`, not consumed.
    func peekSlice(upTo maximum: Int) -> ByteBuffer {
        if self.unencoded != nil {
            var encoded = self
            encoded.encodeProperties()
            return encoded.peekSlice(upTo: maximum)
        }
        var source = self.head
        if source.readableBytes == 0, self.queuedStart < self.queued.count {
            source = self.queued[self.queuedStart]
        }
        return source.getSlice(at: source.readerIndex, length: min(maximum, source.readableBytes))!
    }

    private mutating func promoteIfHeadIsEmpty() {
        guard self.head.readableBytes == 0, self.queuedStart < self.queued.count else { return }
        self.head = self.queued[self.queuedStart]
        self.ownsHead = false
        self.queued[self.queuedStart] = ByteBuffer()
        self.queuedStart += 1
        if self.queuedStart == self.queued.count {
            self.queued.removeAll(keepingCapacity: true)
            self.queuedStart = 0
        }
    }
}
