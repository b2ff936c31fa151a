public import BLIPWire
internal import NIOCore

/// A request handed to a streaming handler as soon as its properties arrive.
public struct BLIPStreamedRequest: Sendable {
    public var properties: BLIPProperties
    public var isUrgent: Bool
    public var isCompressed: Bool
    /// The body, as it arrives. The peer is held back (no ACKs) while it is not read.
    public var body: BLIPBodyStream

    public var profile: String? { self.properties.profile }
}

/// A reply handed over as soon as its properties arrive, its body following as a stream.
public struct BLIPStreamedResponse: Sendable {
    public var properties: BLIPProperties
    /// The body, as it arrives. The peer is held back (no ACKs) while it is not read.
    public var body: BLIPBodyStream
}
