public import BLIPWire
public import NIOCore

/// A message handed to the engine to send.
public struct BLIPOutgoingMessage: Sendable {
    public enum Kind: Hashable, Sendable {
        /// A request; the engine numbers it when its first frame leaves.
        case request
        /// A normal reply to the peer's request with this number.
        case response(toRequest: UInt64)
        /// An error reply to the peer's request with this number.
        case error(toRequest: UInt64)
    }

    public enum Body: Sendable {
        /// The whole body, known now.
        case buffer(ByteBuffer)
        /// A body supplied later in chunks with ``BLIPConnectionEngine/appendBody(_:_:isComplete:)``,
        /// so that a large body never has to sit in memory.
        case streamed
    }

    public var kind: Kind
    public var properties: BLIPProperties
    public var body: Body
    /// Ignored for replies, which inherit their request's urgency (as LiteCore and go-blip do).
    public var isUrgent: Bool
    /// Compress the body (BLIP 3: frame by frame; seed and BLIP 2: gzip). A streamed body is not
    /// compressed in the seed and BLIP 2 dialects, whose gzip covers the whole body.
    public var isCompressed: Bool
    /// A request that must not be answered (requests only).
    public var isNoReply: Bool
    /// The reply's body will be consumed piece by piece (``BLIPConnectionEngine/consumed(_:bytes:)``),
    /// so ACKs wait for the consumer (requests only).
    public var streamsReply: Bool

    public init(
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
