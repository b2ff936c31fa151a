internal import BLIPEngine
public import NIOCore

/// A message body handed out as it arrives. Reading it is what lets the peer send more: until a piece is
/// read, no ACK covers it, so a slow reader holds the sender back instead of buffering without bound.
/// Dropping the stream unread discards the rest of the body. One task reads at a time: a second task that
/// asks for the next piece while another waits for one gets ``BLIPConnectionError/Code/alreadyReading``.
public struct BLIPBodyStream: AsyncSequence, Sendable {
    public typealias Element = ByteBuffer
    public typealias Failure = any Error

    let source: BodyStreamSource

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(source: self.source)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: BodyStreamSource

        public mutating func next() async throws -> ByteBuffer? {
            try await self.source.next()
        }
    }

    /// Reads the whole body into one buffer; throws ``BLIPConnectionError/Code/messageTooLarge`` past
    /// `maximum` bytes.
    public func collect(upTo maximum: Int) async throws -> ByteBuffer {
        var body = ByteBuffer()
        for try await var piece in self {
            guard body.readableBytes + piece.readableBytes <= maximum else {
                throw BLIPConnectionError(.messageTooLarge, "body larger than \(maximum) bytes")
            }
            body.writeBuffer(&piece)
        }
        return body
    }
}

/// The reading end of one body stream; when the last copy of the stream goes, the rest is discarded.
final class BodyStreamSource: Sendable {
    let core: ConnectionCore
    let id: BLIPIncomingID

    init(core: ConnectionCore, id: BLIPIncomingID) {
        self.core = core
        self.id = id
    }

    deinit {
        self.core.abandonStream(self.id)
    }

    func next() async throws -> ByteBuffer? {
        try await self.core.nextChunk(of: self.id)
    }
}
