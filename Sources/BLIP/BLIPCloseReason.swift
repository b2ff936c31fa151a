/// A WebSocket close code (RFC 6455 7.4), as BLIP connections use them: who was wrong, and how.
public struct BLIPCloseCode: RawRepresentable, Hashable, Sendable, ExpressibleByIntegerLiteral,
    CustomStringConvertible
{
    public var rawValue: UInt16

    public init(rawValue: UInt16) { self.rawValue = rawValue }
    public init(integerLiteral value: UInt16) { self.rawValue = value }

    /// The work is done.
    public static let normalClosure: BLIPCloseCode = 1000
    /// The endpoint is going away (shutting down, or the peer stopped answering pings).
    public static let goingAway: BLIPCloseCode = 1001
    /// The peer broke the WebSocket or BLIP protocol (a malformed frame, a bad CRC, numbering).
    public static let protocolError: BLIPCloseCode = 1002
    /// The peer sent data of a kind that is not accepted (a text message).
    public static let unsupportedData: BLIPCloseCode = 1003
    /// The peer sent data inconsistent with its type (invalid UTF-8 in a text message).
    public static let invalidPayload: BLIPCloseCode = 1007
    /// The peer exceeded a limit of the connection (too many messages in flight, too much buffered).
    public static let policyViolation: BLIPCloseCode = 1008
    /// The peer sent a message larger than the connection accepts.
    public static let messageTooBig: BLIPCloseCode = 1009
    /// This side failed (a bug, or a streamed body that could not be finished): not the peer's fault.
    public static let internalError: BLIPCloseCode = 1011
    /// The server is restarting: connect again (IANA's registry, after RFC 6455).
    public static let serviceRestart: BLIPCloseCode = 1012
    /// The server is overloaded for now: connect again later (IANA's registry).
    public static let tryAgainLater: BLIPCloseCode = 1013

    /// Whether the code ends a connection without an error (1000, 1001).
    public var isNormal: Bool { self == .normalClosure || self == .goingAway }

    public var description: String { String(self.rawValue) }
}

/// Why a connection closes: the close code the transport sends, and a short reason for the peer.
public struct BLIPCloseReason: Hashable, Sendable, CustomStringConvertible {
    public var code: BLIPCloseCode
    /// Sent in the close frame (a WebSocket close frame carries at most 123 bytes of it).
    public var reason: String
    /// The connection still has replies to write before the close frame (after a fatal error from the
    /// peer; it bounds what they take): the transport pulls frames until it has none, writable or not.
    package var finishesQueuedReplies = false

    public init(_ code: BLIPCloseCode, _ reason: String = "") {
        self.code = code
        self.reason = reason
    }

    public static let normal = BLIPCloseReason(.normalClosure)
    public static let goingAway = BLIPCloseReason(.goingAway)
    public static func protocolViolation(_ message: String) -> BLIPCloseReason {
        BLIPCloseReason(.protocolError, message)
    }

    public var description: String { self.reason.isEmpty ? "\(self.code)" : "\(self.code): \(self.reason)" }
}

extension BLIPConnectionError {
    /// The error a connection fails with when the peer closes it with `code` (nil for a normal close).
    public init?(closedByPeerWith code: BLIPCloseCode, reason: String) {
        guard !code.isNormal else { return nil }
        let text = "the peer closed with code \(code)\(reason.isEmpty ? "" : ": \(reason)")"
        switch code {
        case .protocolError, .unsupportedData, .invalidPayload, .internalError: self.init(.protocolViolation, text)
        case .policyViolation: self.init(.limitExceeded, text)
        case .messageTooBig: self.init(.messageTooLarge, text)
        default: self.init(.connectionClosed, text)
        }
    }
}
