import BLIP

/// Runs `body` with a client connection to an in-memory server answering with `router`, the way the
/// articles' fragments assume a `connection` already exists.
func withPeer<T: Sendable>(
    router: BLIPRouter,
    _ body: (BLIPConnection) async throws -> T
) async throws -> T {
    let (client, server) = BLIPInMemoryTransport.makePair()
    let serverConnection = BLIPConnection(transport: server, router: router)
    let serving = Task { await serverConnection.run() }
    defer { serving.cancel() }
    return try await withBLIPConnection(over: client) { connection in try await body(connection) }
}

/// A router answering `echo` with the request itself.
func echoRouter() -> BLIPRouter {
    var router = BLIPRouter()
    router.register(profile: "echo") { request, _ in BLIPResponse(properties: request.properties, body: request.body) }
    return router
}
