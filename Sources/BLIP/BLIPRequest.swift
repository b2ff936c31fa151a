public import BLIPWire
public import NIOCore

/// A request: properties (the `Profile` names its purpose) and a body.
public struct BLIPRequest: Sendable, CustomStringConvertible {
    public var properties: BLIPProperties
    public var body: ByteBuffer
    /// Sent ahead of normal traffic (digest 7.9); its reply is urgent too.
    public var isUrgent: Bool
    /// Compress the body on the wire (BLIP 3: frame by frame; seed and BLIP 2: gzip).
    public var isCompressed: Bool

    public init(
        profile: String? = nil,
        properties: BLIPProperties = [:],
        body: ByteBuffer = ByteBuffer(),
        urgent: Bool = false,
        compressed: Bool = false
    ) {
        self.properties = properties
        if let profile { self.properties.profile = profile }
        self.body = body
        self.isUrgent = urgent
        self.isCompressed = compressed
    }

    /// A request whose body is UTF-8 text.
    public init(
        profile: String? = nil,
        properties: BLIPProperties = [:],
        text: String,
        urgent: Bool = false,
        compressed: Bool = false
    ) {
        self.init(
            profile: profile,
            properties: properties,
            body: ByteBuffer(string: text),
            urgent: urgent,
            compressed: compressed
        )
    }

    /// The `Profile` property.
    public var profile: String? {
        get { self.properties.profile }
        set { self.properties.profile = newValue }
    }

    public var description: String {
        "BLIPRequest(\(self.properties), \(self.body.readableBytes) bytes\(self.isUrgent ? ", urgent" : ""))"
    }
}

/// A normal reply (RPY) to a request.
public struct BLIPResponse: Sendable, CustomStringConvertible {
    public var properties: BLIPProperties
    public var body: ByteBuffer
    /// When set, the body is produced as it is sent, in place of `body` (replies we send only; see
    /// ``BLIPBodySource``).
    public var bodyStream: BLIPBodySource?
    /// Compress the body on the wire.
    public var isCompressed: Bool

    public init(properties: BLIPProperties = [:], body: ByteBuffer = ByteBuffer(), compressed: Bool = false) {
        self.properties = properties
        self.body = body
        self.isCompressed = compressed
    }

    /// A reply whose body is UTF-8 text.
    public init(properties: BLIPProperties = [:], text: String, compressed: Bool = false) {
        self.init(properties: properties, body: ByteBuffer(string: text), compressed: compressed)
    }

    public var description: String {
        let body = self.bodyStream == nil ? "\(self.body.readableBytes) bytes" : "streamed body"
        return "BLIPResponse(\(self.properties), \(body))"
    }
}
