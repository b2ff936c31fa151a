/// The type field of a frame's flags: request, response, error response or acknowledgement.
///
/// An open set over the wire value: types a dialect does not define (3, 6, 7) decode as themselves
/// so that the engine can ignore them, as LiteCore and go-blip do.
public struct BLIPMessageType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: UInt8

    public init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// A request, `MSG` (or `REQ`).
    public static let request = BLIPMessageType(rawValue: 0)
    /// A normal reply, `RPY` (or `RES`).
    public static let response = BLIPMessageType(rawValue: 1)
    /// An error reply, `ERR`.
    public static let error = BLIPMessageType(rawValue: 2)
    /// Acknowledges bytes of a request being received (`ACKMSG`; BLIP 2 and 3 only).
    public static let ackRequest = BLIPMessageType(rawValue: 4)
    /// Acknowledges bytes of a response being received (`ACKRPY`; BLIP 2 and 3 only).
    public static let ackResponse = BLIPMessageType(rawValue: 5)

    /// Whether this is a reply (normal or error) to a request.
    public var isResponse: Bool { self == .response || self == .error }

    /// Whether this is an acknowledgement frame.
    public var isACK: Bool { self == .ackRequest || self == .ackResponse }

    /// Whether `dialect` defines this type; frames of other types are to be ignored.
    public func isDefined(in dialect: BLIPDialect) -> Bool {
        switch self {
        case .request, .response, .error: true
        case .ackRequest, .ackResponse: dialect.hasFlowControl
        default: false
        }
    }

    public var description: String {
        switch self {
        case .request: "MSG"
        case .response: "RPY"
        case .error: "ERR"
        case .ackRequest: "ACK_MSG"
        case .ackResponse: "ACK_RPY"
        default: "TYPE\(self.rawValue)"
        }
    }
}
