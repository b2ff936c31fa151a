public import NIOCore

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// A message with a body held whole: requests and replies. Its conveniences read the body as text, `Data`
/// or JSON, so that `import BLIP` alone is enough to use a body (``BLIPRequest`` and ``BLIPResponse`` also
/// take text, `Data` and `Encodable` values when made).
public protocol BLIPMessageBody {
    var body: ByteBuffer { get }
}

extension BLIPMessageBody {
    /// The body as UTF-8 text; a byte sequence that is not UTF-8 becomes U+FFFD.
    public var text: String { String(decoding: self.body.readableBytesView, as: UTF8.self) }

    /// The body's bytes.
    public var data: Data { Data(self.body.readableBytesView) }

    /// The body decoded from JSON.
    public func decode<Value: Decodable>(
        _ type: Value.Type = Value.self,
        using decoder: JSONDecoder = JSONDecoder()
    ) throws -> Value {
        try decoder.decode(type, from: self.data)
    }
}

extension BLIPRequest: BLIPMessageBody {
    /// A request whose body is `data`.
    public init(
        profile: String? = nil,
        properties: BLIPProperties = [:],
        data: Data,
        urgent: Bool = false,
        compressed: Bool = false
    ) {
        self.init(
            profile: profile,
            properties: properties,
            body: ByteBuffer(bytes: data),
            urgent: urgent,
            compressed: compressed
        )
    }

    /// A request whose body is `value` encoded as JSON.
    public init(
        profile: String? = nil,
        properties: BLIPProperties = [:],
        json value: some Encodable,
        using encoder: JSONEncoder = JSONEncoder(),
        urgent: Bool = false,
        compressed: Bool = false
    ) throws {
        self.init(
            profile: profile,
            properties: properties,
            data: try encoder.encode(value),
            urgent: urgent,
            compressed: compressed
        )
    }
}

extension BLIPResponse: BLIPMessageBody {
    /// A reply whose body is `data`.
    public init(properties: BLIPProperties = [:], data: Data, compressed: Bool = false) {
        self.init(properties: properties, body: ByteBuffer(bytes: data), compressed: compressed)
    }

    /// A reply whose body is `value` encoded as JSON.
    public init(
        properties: BLIPProperties = [:],
        json value: some Encodable,
        using encoder: JSONEncoder = JSONEncoder(),
        compressed: Bool = false
    ) throws {
        self.init(properties: properties, data: try encoder.encode(value), compressed: compressed)
    }
}
