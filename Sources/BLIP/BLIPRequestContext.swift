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
