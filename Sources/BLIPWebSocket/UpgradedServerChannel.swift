package import BLIP
package import BLIPWire
package import Logging
package import NIOCore

/// Turns a channel whose HTTP handlers an upgrader has just removed into a server-side BLIP connection:
/// the WebSocket handler of the standalone server, the transport, the connection. Shared by
/// ``BLIPWebSocketServer`` and the integrations that mount BLIP on another HTTP server (BLIPHummingbird),
/// so that all of them frame, time out and apply back-pressure the same way.
package struct UpgradedServerChannel: Sendable {
    /// The WebSocket side of a server connection.
    package struct Settings: Sendable {
        package var heartbeatInterval: TimeAmount?
        package var heartbeatTimeout: TimeAmount
        package var closeTimeout: TimeAmount
        package var maximumMessageSize: Int
        package var frameSize: Int
        package var logger: Logger

        package init(
            heartbeatInterval: TimeAmount?,
            heartbeatTimeout: TimeAmount,
            closeTimeout: TimeAmount,
            maximumMessageSize: Int,
            frameSize: Int,
            logger: Logger
        ) {
            self.heartbeatInterval = heartbeatInterval
            self.heartbeatTimeout = heartbeatTimeout
            self.closeTimeout = closeTimeout
            self.maximumMessageSize = maximumMessageSize
            self.frameSize = frameSize
            self.logger = logger
        }

        var handlerSettings: BLIPWebSocketHandler.Settings {
            BLIPWebSocketHandler.Settings(
                role: .server,
                heartbeatInterval: self.heartbeatInterval,
                heartbeatTimeout: self.heartbeatTimeout,
                closeTimeout: self.closeTimeout,
                frameSize: self.frameSize,
                maximumMessageSize: self.maximumMessageSize,
                logger: self.logger
            )
        }
    }

    /// Installs the WebSocket handler on `channel` (on its event loop) and returns the connection, not yet
    /// running: its owner calls `run()`.
    package static func makeConnection(
        on channel: any Channel,
        dialect: BLIPDialect,
        subprotocol: String?,
        upgradeRequest: BLIPUpgradeRequest,
        identity: (any Sendable)?,
        router: BLIPRouter,
        configuration: BLIPConnection.Configuration,
        settings: Settings,
        capture: BLIPFrameCapture? = nil
    ) throws -> BLIPConnection {
        let handler = BLIPWebSocketHandler(settings: settings.handlerSettings, capture: capture)
        try channel.pipeline.syncOperations.addHandler(handler)
        let transport = BLIPWebSocketTransport(
            dialect: dialect,
            subprotocol: subprotocol,
            handler: handler,
            channel: channel,
            upgradeRequest: upgradeRequest
        )
        var logger = settings.logger
        logger[metadataKey: "blip.remote"] = "\(channel.remoteAddress.map { "\($0)" } ?? "?")"
        return BLIPConnection(
            transport: transport,
            configuration: configuration,
            router: router,
            logger: logger,
            identity: identity
        )
    }

    /// Why the extra headers of an accept cannot go into a 101, or nil.
    package static func problem(acceptHeaders headers: HTTPFields) -> String? {
        UpgradeNegotiation.problem(acceptHeaders: headers)
    }

    /// Why a refusal cannot be sent, or nil.
    package static func problem(refusalStatus status: Int, headers: HTTPFields, body: String) -> String? {
        UpgradeNegotiation.problem(refusalStatus: status, headers: headers, body: body)
    }

    /// `host:port`, `[host]:port` for IPv6.
    package static func describe(_ address: SocketAddress?) -> String? {
        UpgradeNegotiation.describe(address)
    }

    /// The client's certificate chain, leaf first, as DER, when the channel has a TLS server handler.
    package static func peerCertificateChain(_ channel: any Channel) -> [[UInt8]] {
        UpgradeNegotiation.peerCertificateChain(channel)
    }
}
