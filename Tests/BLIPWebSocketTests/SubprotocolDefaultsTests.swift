import BLIP
import BLIPWebSocket
import Testing

/// `BLIP_3+CBMobile_4`, which LiteCore requires for databases with version vectors: spoken by default, and
/// refused with a typed error naming both sides' subprotocols by a server that does not speak it.
@Suite("CBMobile_4 and subprotocol refusals", .timeLimit(.minutes(1)))
struct SubprotocolDefaultsTests {
    @Test("a default server accepts a client that offers only BLIP_3+CBMobile_4")
    func defaultServerSpeaksIt() async throws {
        #expect(BLIPWebSocketServer.Configuration().subprotocols.first == BLIPSubprotocol.couchbaseMobile4)
        try await withServer { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = [BLIPSubprotocol.couchbaseMobile4]
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: configuration
            ) { connection in
                #expect(connection.dialect == .blip3)
                #expect(connection.handshakeResponse?.subprotocol == "BLIP_3+CBMobile_4")
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
        }
    }

    @Test("a server without it answers HTTP 500; the error names what was offered and what the server speaks")
    func refusal() async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.subprotocols = BLIPSubprotocol.couchbaseMobileDefaults
        try await withServer(serverConfiguration) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = [BLIPSubprotocol.couchbaseMobile4]
            let error = await #expect(throws: BLIPHandshakeError.self) {
                try await BLIPWebSocketClient.connect(
                    to: "ws://127.0.0.1:\(server.port)/",
                    configuration: configuration
                ) {
                    _ in
                }
            }
            #expect(error?.code == .subprotocolRefused && error?.status == 500)
            #expect(error?.offeredSubprotocols == ["BLIP_3+CBMobile_4"])
            #expect(error?.serverSubprotocols == ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"])
            let text = "\(error.map { "\($0)" } ?? "")"
            #expect(text.contains("offered BLIP_3+CBMobile_4"), "\(text)")
            #expect(text.contains("I only speak BLIP_3+CBMobile_3, BLIP_3+CBMobile_2 protocols"), "\(text)")
        }
    }
}
