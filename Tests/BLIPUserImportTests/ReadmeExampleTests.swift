import BLIP
import BLIPWebSocket
import Testing

/// The README's library example, compiled and run as it is printed there, with the README's imports and
/// nothing else (no NIO, no Foundation): ReadmeTextTests compares the code between the markers with the
/// README's first Swift block, so that the two cannot drift apart. It throws if the server refuses the
/// credentials (it once bound a fixed port and connected without the credentials its server asked for: a
/// 401) or if the reply is not the JSON it decodes.
@Suite("The README's example", .timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test("runs as printed: the client gets its JSON reply from the server")
    func runsAsPrinted() async throws {
        // README begin
        struct Greeting: Codable, Equatable {
            var name: String
        }

        var router = BLIPRouter()
        router.register(profile: "hello") { request, _ in
            let greeting = try request.decode(Greeting.self)  // the body as JSON
            return try BLIPResponse(json: Greeting(name: "hello, \(greeting.name)"))
        }

        // A server on any free port (4985 by default); the optional upgrade handler decides who may connect
        // (context.identity in handlers)
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router) { request in
            guard let login = request.basicCredentials, login.user == "alice", login.password == "s3cret" else {
                return .unauthorized(realm: "db")
            }
            return .accept(identity: login.user)
        }
        Task { await server.run() }

        // A client, with the credentials the server asks for
        var client = BLIPWebSocketClient.Configuration()
        client.credentials = .basic(user: "alice", password: "s3cret")
        let url = "ws://127.0.0.1:\(server.port)/db/_blipsync"
        try await BLIPWebSocketClient.connect(to: url, configuration: client) { connection in
            let request = try BLIPRequest(profile: "hello", json: Greeting(name: "Ada"), compressed: true)
            let reply = try await connection.sendRequest(request)
            print(reply.text)  // {"name":"hello, Ada"}
            print(try reply.decode(Greeting.self).name)  // hello, Ada
        }
        await server.close()
        // README end
    }
}
