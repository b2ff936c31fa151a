import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import Testing

/// The README's library example, compiled and run as it is printed there: the code between the markers
/// below is compared with the README's first Swift block (after its imports, which this file has), so that
/// the two cannot drift apart. (It once bound a fixed port and connected without the credentials its server asked for: a 401.)
@Suite("The README's example", .timeLimit(.minutes(1)))
struct ReadmeExampleTests {
    @Test("runs as printed: the client gets its echo from the server")
    func runsAsPrinted() async throws {
        // README begin
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body)
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
        let url = "ws://alice:s3cret@127.0.0.1:\(server.port)/db/_blipsync"
        try await BLIPWebSocketClient.connect(to: url) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi", compressed: true))
            print(String(buffer: reply.body))
        }
        await server.close()
        // README end
    }

    @Test("the code above is the README's, line for line")
    func matchesTheReadme() throws {
        let here = URL(fileURLWithPath: #filePath)
        let source = try String(contentsOf: here, encoding: .utf8)
        let readme = try String(
            contentsOf: here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("README.md"),
            encoding: .utf8
        )
        let tested = try #require(Self.between("        // README begin\n", and: "        // README end", in: source))
            .split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }
            .joined(separator: "\n")
        let printed = try #require(
            Self.between("```swift\nimport BLIP\nimport BLIPWebSocket\n", and: "```", in: readme)?.components(
                separatedBy: "\n\n"
            )
            .dropFirst()
            .joined(separator: "\n\n")
        )
        #expect(tested == printed)
    }

    /// The text after the first `start` and before the next `end`.
    static func between(_ start: String, and end: String, in text: String) -> String? {
        guard let from = text.range(of: start)?.upperBound, let to = text[from...].range(of: end)?.lowerBound else {
            return nil
        }
        return String(text[from..<to])
    }
}
