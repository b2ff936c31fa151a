public import Logging

/// What a handler gets besides the request.
public struct BLIPRequestContext: Sendable {
    /// The connection the request came on, for requests back to the same peer.
    public var connection: BLIPConnection
    /// A logger carrying the request's number as metadata.
    public var logger: Logger
    /// The request's number on the wire.
    public var requestNumber: UInt64
    /// False for no-reply requests: whatever the handler returns is not sent.
    public var expectsReply: Bool
}

extension BLIPRequestContext {
    /// The connection's ``BLIPConnection/identity``: who the peer is, as the application decided.
    public var identity: (any Sendable)? { self.connection.identity }

    /// The connection's identity as a `T`, or nil.
    public func identity<T: Sendable>(as type: T.Type) -> T? { self.connection.identity(as: type) }
}
