public import Logging

/// What a handler gets besides the request.
public struct BLIPRequestContext: Sendable {
    /// The connection the request came on, for requests back to the same peer.
    public var connection: BLIPConnection
    /// The request's number on the wire.
    public var requestNumber: UInt64
    /// False for no-reply requests: whatever the handler returns is not sent.
    public var expectsReply: Bool
    /// The connection's logger; the request's number is added when a handler asks for ``logger``.
    private var connectionLogger: Logger
    private var assignedLogger: Logger?

    init(connection: BLIPConnection, connectionLogger: Logger, requestNumber: UInt64, expectsReply: Bool) {
        self.connection = connection
        self.connectionLogger = connectionLogger
        self.requestNumber = requestNumber
        self.expectsReply = expectsReply
    }

    /// A logger carrying the request's number as metadata (`blip.request`).
    ///
    /// Made when asked for, not for every request: adding metadata costs a log handler allocations (swift-log's
    /// stream handler re-renders all of it), about 9 of a round trip's 38 when every request paid for it.
    public var logger: Logger {
        get {
            if let assigned = self.assignedLogger { return assigned }
            var logger = self.connectionLogger
            logger[metadataKey: "blip.request"] = "\(self.requestNumber)"
            return logger
        }
        set { self.assignedLogger = newValue }
    }
}

extension BLIPRequestContext {
    /// The connection's ``BLIPConnection/identity``: who the peer is, as the application decided.
    public var identity: (any Sendable)? { self.connection.identity }

    /// The connection's identity as a `T`, or nil.
    public func identity<T: Sendable>(as type: T.Type) -> T? { self.connection.identity(as: type) }
}

extension BLIPRequestContext {
    /// Closes the connection right after this request's reply: the reply (or the ERR the handler throws)
    /// is written, then the close frame with `code` and `reason`. No other handler's reply is written after
    /// it, and every request still pending on the connection fails once with this close: on this side with
    /// ``BLIPConnectionError/Code/connectionClosed``, on the peer's with the code and reason it received.
    /// A request that expects no reply has none to wait for: the connection closes at once.
    ///
    /// For a server that ends a session from one of its handlers (an expired session, a revoked user)
    /// without racing its other handlers, as `Task { await connection.close(...) }` would.
    ///
    /// - Parameters:
    ///   - code: Must be ``BLIPCloseCode/isSendable`` (1000, 1001, 1008, 1011, 4000-4999, ...).
    ///   - reason: Sent in the close frame; cut to its first 123 bytes (whole characters).
    public func closeAfterReply(code: BLIPCloseCode = .normalClosure, reason: String = "") {
        precondition(code.isSendable, "close code \(code) cannot be sent (RFC 6455 7.4)")
        self.connection.core.closeAfterReply(
            to: self.requestNumber,
            expectsReply: self.expectsReply,
            BLIPCloseReason(code, BLIPConnection.closeFrameReason(reason))
        )
    }
}
