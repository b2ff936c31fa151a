/// Something went wrong locally, not an ERR reply: the peer broke the protocol, the connection or transport
/// failed, the handshake was refused, a message was too large. Equal when the codes are.
public struct BLIPConnectionError: Error, Hashable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case protocolViolation
            case connectionClosed
            case transportFailed
            case subprotocolRejected
            case handshakeFailed
            case messageTooLarge
            case heartbeatTimedOut
            case invalidMessage
            case shutDown
            case limitExceeded
            case timedOut
            case tlsFailed
            case alreadyReading
        }

        private var base: Base

        /// The peer broke a fatal rule of the protocol (varint, CRC, deflate, numbering...).
        public static let protocolViolation = Code(base: .protocolViolation)
        /// The connection closed (normally, or by the peer) before this could complete.
        public static let connectionClosed = Code(base: .connectionClosed)
        /// The network failed: reset, EOF mid-frame, TLS error, connect timeout.
        public static let transportFailed = Code(base: .transportFailed)
        /// The WebSocket handshake chose no subprotocol we offered, or the server refused all of ours.
        public static let subprotocolRejected = Code(base: .subprotocolRejected)
        /// The WebSocket handshake failed for another reason (HTTP status, bad response).
        public static let handshakeFailed = Code(base: .handshakeFailed)
        /// A message was larger than the configured maximum.
        public static let messageTooLarge = Code(base: .messageTooLarge)
        /// No pong arrived in time after a ping.
        public static let heartbeatTimedOut = Code(base: .heartbeatTimedOut)
        /// The message could not be sent as given (a property with NUL, a reply to a no-reply request...).
        public static let invalidMessage = Code(base: .invalidMessage)
        /// The connection is shutting down and takes no new work.
        public static let shutDown = Code(base: .shutDown)
        /// The peer exceeded a limit of the connection: too many messages in flight, or more buffered data
        /// than the connection's budget (closed with 1008).
        public static let limitExceeded = Code(base: .limitExceeded)
        /// A request's timeout passed before its reply came; the request was then cancelled.
        public static let timedOut = Code(base: .timedOut)
        /// The TLS handshake failed: the server's certificate is not trusted (or not the pinned one), or the
        /// server refused this client's certificate, or its lack of one (mutual TLS).
        public static let tlsFailed = Code(base: .tlsFailed)
        /// Another task is already waiting for this body stream's next piece: a body stream has one reader
        /// at a time. The waiting reader is not disturbed.
        public static let alreadyReading = Code(base: .alreadyReading)

        public var description: String { String(describing: self.base) }
    }

    public var code: Code
    public var message: String
    /// The error behind this one, if any.
    public var underlying: (any Error)?
    /// How the connection ended, when this error is its end (what pending requests fail with once it has
    /// closed): the close code, reason and who closed it.
    public var closeStatus: BLIPCloseStatus?

    public init(
        _ code: Code,
        _ message: String,
        underlying: (any Error)? = nil,
        closeStatus: BLIPCloseStatus? = nil
    ) {
        self.code = code
        self.message = message
        self.underlying = underlying
        self.closeStatus = closeStatus
    }

    public static func == (lhs: BLIPConnectionError, rhs: BLIPConnectionError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }

    public var description: String { "BLIPConnectionError(\(self.code): \(self.message))" }
}
