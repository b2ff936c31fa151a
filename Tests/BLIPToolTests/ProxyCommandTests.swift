import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import Testing

@Suite("blip proxy", .timeLimit(.minutes(3)))
struct ProxyCommandTests {
    @Test("the built blip relays a client to blip serve, logs each message as JSON, and exits 0 on SIGTERM")
    func relaysAndLogs() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "the blip executable is not beside the tests: build with `swift build --build-tests`"
        )
        let server = try await ServerProcess.start(executable)
        let proxy = try await ServerProcess.start(
            executable,
            command: ["proxy", "--listen", "127.0.0.1:0", "--upstream", "ws://127.0.0.1:\(server.port)"],
            arguments: ["--json", "--redact", "--redact-property", "Secret"],
            announcesOnStandardError: true
        )
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.subprotocols = [BLIPSubprotocol.blip2]
        try await BLIPWebSocketClient.connect(
            to: "ws://alice:pw@127.0.0.1:\(proxy.port)/db/_blipsync",
            configuration: configuration
        ) { connection in
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "echo", properties: ["Secret": "hunter2"], text: "through the proxy")
            )
            #expect(String(buffer: reply.body) == "through the proxy")
        }
        let log = await proxy.stopped()
        _ = await server.stopped()
        #expect(proxy.process.terminationStatus == 0, "\(log)")
        let events = log.split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        #expect(events.count == log.split(separator: "\n").count, "every line is JSON: \(log)")
        let handshake = try #require(events.first { $0["event"] as? String == "handshake" })
        #expect(handshake["dialect"] as? String == "blip2" && handshake["status"] as? Int == 101)
        #expect(!log.contains("YWxpY2U6cHc="), "the credentials are redacted")
        let messages = events.filter { $0["event"] as? String == "message" }
        #expect(messages.map { "\($0["direction"]!) \($0["type"]!)#\($0["number"]!)" } == ["c2s MSG#1", "s2c RPY#1"])
        #expect(messages.allSatisfy { $0["body_text"] as? String == "through the proxy" })
        #expect(!log.contains("hunter2"))
        #expect(events.last?["event"] as? String == "closed")
    }
}
