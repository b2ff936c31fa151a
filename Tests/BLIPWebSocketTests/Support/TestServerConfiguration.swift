import BLIPWebSocket
import NIOCore

extension BLIPWebSocketServer.Configuration {
    /// The defaults, but with a handshake timeout of 60 s: with every suite running at once on two cores, an
    /// upgrade has waited past the default 10 s. Tests of the timeout itself set their own.
    static var forTests: Self {
        var configuration = Self()
        configuration.handshakeTimeout = .seconds(60)
        return configuration
    }
}
