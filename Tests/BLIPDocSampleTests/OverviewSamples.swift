import BLIP
import BLIPWebSocket
import Testing

/// The complete programs of the overview pages: a WebSocket server and a client in one process.
@Suite("Samples of the overview pages", .timeLimit(.minutes(1)))
struct OverviewSamples {
    @Test("GettingStarted.md: a WebSocket server on a free port and a client")
    func gettingStartedOverWebSocket() async throws {
        let router = echoRouter()
        // sample: BLIP.docc/GettingStarted.md #4
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0  // any free port (4985 by default)
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        Task { await server.run() }

        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
            print(reply.text)
        }
        await server.close()
        // end sample
    }

    @Test("BLIPWebSocket.md: a server that asks for credentials, and a client that gives them")
    func webSocketOverview() async throws {
        // sample: BLIPWebSocket.docc/BLIPWebSocket.md #1
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body)
        }

        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0  // any free port (4985 by default)
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router) { request in
            guard let login = request.basicCredentials, login.user == "alice", login.password == "s3cret" else {
                return .unauthorized(realm: "db")
            }
            return .accept(identity: login.user)
        }
        Task { await server.run() }

        var client = BLIPWebSocketClient.Configuration()
        client.credentials = .basic(user: "alice", password: "s3cret")
        let url = "ws://127.0.0.1:\(server.port)/db/_blipsync"
        try await BLIPWebSocketClient.connect(to: url, configuration: client) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
            print(reply.text)
        }
        await server.close()
        // end sample
    }
}
