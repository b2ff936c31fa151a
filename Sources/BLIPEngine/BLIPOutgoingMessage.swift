package import BLIPWire
package import NIOCore

/// A message handed to the engine to send.
package struct BLIPOutgoingMessage: Sendable {
    package enum Kind: Hashable, Sendable {
        /// A request; the engine numbers it when its first frame leaves.
        case request
        /// A normal reply to the peer's request with this number.
        case response(toRequest: UInt64)
        /// An error reply to the peer's request with this number.
        case error(toRequest: UInt64)
    }

    package enum Body: Sendable {
        /// The whole body, known now.
        case buffer(ByteBuffer)
        /// A body supplied later in chunks with ``BLIPConnectionEngine/appendBody(_:_:isComplete:)``,
        /// so that a large body never has to sit in memory.
        case streamed
    }

    package var kind: Kind
    package var properties: BLIPProperties
    package var body: Body
    /// Ignored for replies, which inherit their request's urgency (as LiteCore and go-blip do).
    package var isUrgent: Bool
    /// Compress the body (BLIP 3: frame by frame; seed and BLIP 2: gzip). A streamed body is not
    /// compressed in the seed and BLIP 2 dialects, whose gzip covers the whole body.
    package var isCompressed: Bool
    /// Set when the body was gzipped ahead, outside the connection's lock (``BLIPGzippedBody``; seed and
    /// BLIP 2 only): `body` is then what goes on the wire, and the frames carry the compressed flag if the
    /// outcome says the body is gzip.
    package var gzippedAhead: BLIPFrameEncoder.GzipOutcome?
    /// A request that must not be answered (requests only).
    package var isNoReply: Bool
    /// The reply's body will be consumed piece by piece (``BLIPConnectionEngine/consumed(_:bytes:)``),
    /// so ACKs wait for the consumer (requests only).
    package var streamsReply: Bool

    package init(
        _ kind: Kind,
        properties: BLIPProperties,
        body: Body = .buffer(ByteBuffer()),
        urgent: Bool = false,
        compressed: Bool = false,
        noReply: Bool = false,
        streamsReply: Bool = false
    ) {
        self.kind = kind
        self.properties = properties
        self.body = body
        self.isUrgent = urgent
        self.isCompressed = compressed
        self.isNoReply = noReply
        self.streamsReply = streamsReply
    }

    var type: BLIPMessageType {
        switch self.kind {
        case .request: .request
        case .response: .response
        case .error: .error
        }
    }
}
