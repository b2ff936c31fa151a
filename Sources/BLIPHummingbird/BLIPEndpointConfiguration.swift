public import BLIP
internal import BLIPWebSocket
internal import NIOCore

/// How a BLIP endpoint mounted on a Hummingbird router negotiates and runs its connections: the same
/// settings, with the same defaults, as `BLIPWebSocketServer.Configuration` has for the standalone server.
public struct BLIPEndpointConfiguration: Sendable {
    /// Subprotocols spoken. The first of the client's offers that is spoken wins (the client's preference,
    /// as in go-blip); a client offering none of them gets HTTP 500 naming them, as from go-blip.
    public var subprotocols = BLIPSubprotocol.serverDefaults
    /// Clients that offer no subprotocol speak the seed dialect (otherwise they are refused).
    public var acceptsSeedDialect = false
    public var heartbeatInterval: Duration? = .seconds(300)
    public var heartbeatTimeout = Duration.seconds(30)
    /// After sending a close frame, how long to wait for the peer's before closing the TCP connection.
    public var closeTimeout = Duration.seconds(2)
    /// The largest WebSocket message accepted (fragments reassembled); a single frame is also bounded by
    /// the server builder's `maximumFrameSize`.
    public var maximumMessageSize = 1 << 20
    /// How long each connection may finish what is in flight when the application shuts down gracefully,
    /// before it is closed with 1001 anyway.
    public var drainTimeout = Duration.seconds(10)
    public var connection = BLIPConnection.Configuration()
    /// Origins, besides the endpoint's own, whose web pages may open connections (exact origins, host
    /// patterns such as `*.example.com`, or `*` for all), checked before `shouldUpgrade`: an upgrade from
    /// another site's page gets 403, as from `BLIPWebSocketServer` (see its configuration's
    /// `allowedOrigins` for the rules). Upgrades without `Origin` (not from a browser) are not affected.
    public var allowedOrigins: [String] = []

    public init() {}
}
