public import BLIP
internal import NIOHTTP1

/// The server's answer to the WebSocket upgrade request of a connection the client opened: the session
/// cookies (every `Set-Cookie`) and whatever else a Sync Gateway-like server says before BLIP starts.
public struct BLIPHandshakeResponse: Sendable, Hashable {
    /// The HTTP status: 101 for every connection that opened.
    public var status: Int
    public var reason: String
    /// Every header field of the response, in order, repeated names kept.
    public var headers: HTTPFields
    /// The negotiated subprotocol, if any (none in the seed dialect).
    public var subprotocol: String?

    public init(status: Int, reason: String, headers: HTTPFields, subprotocol: String?) {
        self.status = status
        self.reason = reason
        self.headers = headers
        self.subprotocol = subprotocol
    }

    init(_ head: HTTPResponseHead, subprotocol: String?) {
        self.init(
            status: Int(head.status.code),
            reason: head.status.reasonPhrase,
            headers: HTTPFields(head.headers),
            subprotocol: subprotocol
        )
    }
}

extension HTTPFields {
    init(_ headers: HTTPHeaders) {
        self.init(headers.map { ($0.name, $0.value) })
    }
}

extension BLIPConnection {
    /// For a connection opened by ``BLIPWebSocketClient``, the server's response to the upgrade request
    /// (after any redirects); nil for other connections.
    public var handshakeResponse: BLIPHandshakeResponse? {
        (self.transport as? BLIPWebSocketTransport)?.handshakeResponse
    }
}
