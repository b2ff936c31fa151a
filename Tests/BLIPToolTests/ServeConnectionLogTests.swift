import BLIP
import BLIPWebSocket
import Foundation
import Testing

/// `blip serve` logs each connection's start and end and counts requests to unknown profiles (its
/// `stats` profile) with the server's connection observer, not a task per connection.
@Suite("blip serve's per-connection log and unknown profiles", .timeLimit(.minutes(2)))
struct ServeConnectionLogTests {
    @Test("an unknown profile gets ERR BLIP/404 and is counted; the connection's start and end are logged")
    func unknownProfileAndConnectionLog() async throws {
        let executable = try #require(ServerProcess.executable, "build the blip product first")
        let server = try await ServerProcess.start(executable)
        defer { _ = server.stop() }  // at once if the test failed before the end; a no-op otherwise
        let unhandled = try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
            for _ in 0..<2 {
                do {
                    _ = try await connection.sendRequest(BLIPRequest(profile: "no-such-profile", text: "x"))
                    Issue.record("an unknown profile was answered")
                } catch let error as BLIPError {
                    #expect(error.domain == .blip && error.code == .notFound, "\(error)")
                }
            }
            let reply = try await connection.sendRequest(BLIPRequest(profile: "stats"))
            let stats = try JSONSerialization.jsonObject(with: Data(reply.body.readableBytesView)) as? [String: Int]
            return stats?["unhandled"]
        }
        #expect(unhandled == 2)
        // Stopping waits for every connection's task, whose end logs the close.
        let log = await server.stopped()
        let lines = log.split(separator: "\n")
        #expect(lines.contains { $0.hasSuffix("] connection") && $0.contains("remote=") }, "\(log)")
        #expect(lines.contains { $0.hasSuffix("] closed") && $0.contains("frames_in=") }, "\(log)")
    }
}
