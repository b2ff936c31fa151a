/// How a connection ended: the close code and reason, who ended it, and the error behind it.
///
/// ``BLIPConnection/closeStatus`` holds it once the connection has closed, ``BLIPConnection/run()``
/// returns it, and every request still pending then fails with a ``BLIPConnectionError`` that carries it
/// (``BLIPConnectionError/closeStatus``), so that no one has to read a code out of a message.
public struct BLIPCloseStatus: Sendable, CustomStringConvertible {
    /// Who ended the connection.
    public enum Initiator: Hashable, Sendable, CustomStringConvertible {
        /// This side: the application closed it, or the connection failed it for the peer's mistake (a bad
        /// frame: ``code`` says which), or for its own.
        case local
        /// The peer sent a close frame (or, over the in-memory transport, closed its end).
        case peer
        /// The network failed or the peer vanished without a close frame (reset, EOF, TLS error, no pong):
        /// ``code`` is 1006, which is never sent.
        case transport

        public var description: String {
            switch self {
            case .local: "local"
            case .peer: "peer"
            case .transport: "transport"
            }
        }
    }

    public var code: BLIPCloseCode
    /// The close frame's reason (sent or received), or what went wrong.
    public var reason: String
    public var initiator: Initiator
    /// The error behind the close, for a close that is not normal: what the peer did wrong, or what
    /// failed.
    public var underlying: (any Error)?

    public init(code: BLIPCloseCode, reason: String = "", initiator: Initiator, underlying: (any Error)? = nil) {
        self.code = code
        self.reason = reason
        self.initiator = initiator
        self.underlying = underlying
    }

    /// Whether the connection ended as agreed (1000 or 1001, sent or received), not for an error.
    public var isNormal: Bool { self.code.isNormal && self.initiator != .transport && self.underlying == nil }

    /// Whether connecting again may succeed, for a retry policy: not after a protocol error, a refused
    /// message kind or a policy violation (the same bytes would fail again), but after a normal close, a
    /// server going away (1001) or restarting (1012), an internal error (1011), "try again later" (1013),
    /// a network failure (1006), or an application code (4000-4999, whose meaning only the application
    /// knows: it decides).
    public var isTransient: Bool {
        switch self.code {
        case .protocolError, .unsupportedData, .invalidPayload, .policyViolation, .messageTooBig: false
        default: true
        }
    }

    public var description: String {
        var text = "closed by \(self.initiator) with \(self.code)"
        if !self.reason.isEmpty { text += ": \(self.reason)" }
        if let underlying = self.underlying, !(underlying is BLIPConnectionError) { text += " (\(underlying))" }
        return text
    }
}

extension BLIPCloseCode {
    /// The connection ended without a close frame (RFC 6455 7.1.5): the network failed or the peer
    /// vanished. Reported, never sent.
    public static let abnormalClosure: BLIPCloseCode = 1006

    /// Whether an application may close a connection with this code: 1000-1003 and 1007-1011 (RFC 6455
    /// 7.4), 1012-1014 (registered with IANA since: service restart, try again later, bad gateway) and the
    /// registered and private ranges 3000-4999. 1005, 1006 and 1015 are never sent.
    public var isSendable: Bool {
        (1000...1003).contains(self.rawValue) || (1007...1014).contains(self.rawValue)
            || (3000...4999).contains(self.rawValue)
    }
}
