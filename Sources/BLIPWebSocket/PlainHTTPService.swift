package import NIOCore
package import NIOHTTP1

/// What a ``BLIPWebSocketServer`` answers to plain HTTP requests (not upgrades) on its BLIP port, and how
/// it then judges browser pages that upgrade. The package's extension point for the web bridge's static
/// files (module BLIPWebBridge), so that a user of the server alone does not build them.
package protocol PlainHTTPService: Sendable {
    /// Serve clients that are not on this machine (otherwise 403, and the `Host` must name this machine).
    var servesRemoteClients: Bool { get }
    /// Origins besides the server's own whose pages may open connections.
    var allowedOrigins: [String] { get }
    /// Made when the server binds: a setting that cannot work (a missing folder) fails the bind.
    func makeResponder() throws -> any PlainHTTPResponder
}

/// Answers one plain HTTP request, then closes the connection.
package protocol PlainHTTPResponder: Sendable {
    /// Writes the answer to `head` on `context`'s channel and closes it; `origins` is the server's browser
    /// rule (client addresses and `Host` names that may be served).
    func respond(to head: HTTPRequestHead, context: ChannelHandlerContext, origins: BrowserOriginRule)
}
