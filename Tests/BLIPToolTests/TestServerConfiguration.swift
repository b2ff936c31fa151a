import BLIP
import BLIPWebSocket
import NIOCore

@testable import BLIPTool

extension BLIPWebSocketServer.Configuration {
    /// The defaults, but with a handshake timeout of 60 s: with every suite running at once on two cores, an
    /// upgrade has waited past the default 10 s. Tests of the timeout itself set their own.
    static var forTests: Self {
        var configuration = Self()
        configuration.handshakeTimeout = .seconds(60)
        return configuration
    }
}

extension BLIPWebSocketServer {
    /// A server of `blip serve`'s standard profiles on a free loopback port, configured for tests and then by
    /// `configure`; the caller runs it.
    static func bindStandardProfiles(
        _ configure: (inout Configuration) -> Void = { _ in }
    ) async throws -> BLIPWebSocketServer {
        var router = BLIPRouter()
        router.register(StandardProfiles())
        var configuration = Configuration.forTests
        configuration.port = 0
        configure(&configuration)
        return try await Self.bind(configuration: configuration, router: router)
    }
}
