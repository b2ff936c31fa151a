import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import Testing

/// `blip serve --session-token`: one-time tokens offered as a `SyncGatewaySession_<token>` subprotocol entry
/// (Sync Gateway 3.3+'s way for browsers), from the Swift client: the statuses a browser cannot see.
@Suite("blip serve and session tokens", .timeLimit(.minutes(2)))
struct ServeSessionTokenTests {
    @Test("a token admits one connection and is not echoed; a used one, an unknown one or none get 401")
    func oneTime() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let server = try await ServerProcess.start(executable, arguments: ["--session-token", "s3cret-token"])
        defer { _ = server.stop() }
        func connect(token: String?) async throws -> String {
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.sessionToken = token
            return try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: configuration
            ) { connection in
                let whoami = try await connection.sendRequest(BLIPRequest(profile: "whoami"))
                let echoed = connection.handshakeResponse?.headers["Sec-WebSocket-Protocol"] ?? []
                return "\(String(buffer: whoami.body)) \(echoed)"
            }
        }
        #expect(try await connect(token: "s3cret-token") == "session [\"BLIP_3+CBMobile_3\"]")
        for token in ["s3cret-token", "other", nil] as [String?] {
            let error = await #expect(throws: BLIPHandshakeError.self) { try await connect(token: token) }
            #expect(error?.status == 401, "token \(token ?? "none")")
            #expect(!"\(error.map { "\($0)" } ?? "")".contains("s3cret-token"), "the token appears in the error")
        }
        _ = await server.stopped()
    }
}
