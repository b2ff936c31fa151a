public import NIOCore

/// The part of a message's data stream (property block, then body) that has not been framed yet, as a
/// queue of buffers: a large body is framed straight from the caller's buffer, and a streamed body is
/// appended chunk by chunk as it is produced.
public struct BLIPMessageData: Sendable {
    private var head: ByteBuffer
    private var queued: [ByteBuffer] = []
    private var queuedStart = 0
    /// Bytes not yet framed.
    public private(set) var readableBytes: Int

    public init() {
        self.head = ByteBuffer()
        self.readableBytes = 0
    }

    public init(_ buffer: ByteBuffer) {
        self.head = buffer
        self.readableBytes = buffer.readableBytes
    }

    /// Appends bytes at the end of the stream (no copy).
    public mutating func append(_ buffer: ByteBuffer) {
        guard buffer.readableBytes > 0 else { return }
        self.readableBytes += buffer.readableBytes
        if self.head.readableBytes == 0 && self.queuedStart == self.queued.count {
            self.head = buffer
        } else {
            self.queued.append(buffer)
        }
    }

    /// The next contiguous piece of the stream, at most `maximum` bytes, consumed.
    mutating func readSlice(upTo maximum: Int) -> ByteBuffer {
        self.promoteIfHeadIsEmpty()
        let length = min(maximum, self.head.readableBytes)
        let slice = self.head.readSlice(length: length)!
        self.readableBytes -= length
        return slice
    }

    /// The first contiguous bytes of the stream, at most `maximum`, not consumed.
    func peekSlice(upTo maximum: Int) -> ByteBuffer {
        var source = self.head
        if source.readableBytes == 0, self.queuedStart < self.queued.count {
            source = self.queued[self.queuedStart]
        }
        return source.getSlice(at: source.readerIndex, length: min(maximum, source.readableBytes))!
    }

    private mutating func promoteIfHeadIsEmpty() {
        guard self.head.readableBytes == 0, self.queuedStart < self.queued.count else { return }
        self.head = self.queued[self.queuedStart]
        self.queued[self.queuedStart] = ByteBuffer()
        self.queuedStart += 1
        if self.queuedStart == self.queued.count {
            self.queued.removeAll(keepingCapacity: true)
            self.queuedStart = 0
        }
    }
}
