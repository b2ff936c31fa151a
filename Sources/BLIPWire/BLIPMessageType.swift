/// The type field of a frame's flags: request, response, error response or acknowledgement.
///
/// An open set over the wire value: types a dialect does not define (3, 6, 7) decode as themselves
/// so that the engine can ignore them, as LiteCore and go-blip do.
package struct BLIPMessageType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: UInt8

    package init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// A request, `MSG` (or `REQ`).
    package static let request = BLIPMessageType(rawValue: 0)
    /// A normal reply, `RPY` (or `RES`).
    package static let response = BLIPMessageType(rawValue: 1)
    /// An error reply, `ERR`.
    package static let error = BLIPMessageType(rawValue: 2)
    /// Acknowledges bytes of a request being received (`ACKMSG`; BLIP 2 and 3 only).
    package static let ackRequest = BLIPMessageType(rawValue: 4)
    /// Acknowledges bytes of a response being received (`ACKRPY`; BLIP 2 and 3 only).
    package static let ackResponse = BLIPMessageType(rawValue: 5)

    /// Whether this is a reply (normal or error) to a request.
    package var isResponse: Bool { self == .response || self == .error }

    /// Whether this is an acknowledgement frame.
    package var isACK: Bool { self == .ackRequest || self == .ackResponse }

    /// Whether `dialect` defines this type; frames of other types are to be ignored.
    package func isDefined(in dialect: BLIPDialect) -> Bool {
        switch self {
        case .request, .response, .error: true
        case .ackRequest, .ackResponse: dialect.hasFlowControl
        default: false
        }
    }

    package var description: String {
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
