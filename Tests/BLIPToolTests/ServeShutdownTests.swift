import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

/// `blip serve` on SIGTERM: a real signal to a real process, with a request in flight.
@Suite("blip serve graceful shutdown", .timeLimit(.minutes(3)))
struct ServeShutdownTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    @Test("SIGTERM: the request in flight completes, a new one gets ERR 503, then 1001, and the process exits 0")
    func sigtermDrains() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let server = try await ServerProcess.start(executable, arguments: ["--drain-timeout", "30"])
        defer { _ = server.stop() }  // at once if the test failed before the end; a no-op otherwise
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)

        let count = NIOLockedValueBox<String?>(nil)
        // The server ends the session: the scoped client throws what ended it.
        let ended = await #expect(throws: BLIPConnectionError.self) {
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: configuration,
                eventLoopGroup: Self.group
            ) { connection in
                // A request whose body is still arriving when the signal comes.
                let upload = Task {
                    try await connection.sendRequest(BLIPRequest(profile: "sink"), body: body)
                }
                // Two pieces: a streamed body is read one piece ahead (to know which is the last).
                pieces.yield(ByteBuffer(repeating: 1, count: 1000))
                pieces.yield(ByteBuffer(repeating: 1, count: 1000))
                try await eventually { connection.statistics.bytesSent >= 1000 }
                // Frames are read in order: once this echo is answered, the server has the request above.
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "before"))

                kill(server.processID, SIGTERM)
                // Draining starts when the process handles the signal: until then an echo still succeeds.
                // Any other error fails the test.
                let refusal = try await eventuallyThrown(BLIPError.self) {
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "late?"))
                }
                #expect(refusal?.code == .busy && refusal?.domain == .blip)
                #expect(!connection.isClosed)

                pieces.yield(ByteBuffer(repeating: 2, count: 500))
                pieces.finish()
                let reply = try await upload.value
                count.withLockedValue { $0 = reply.properties["Count"] }
                try await Task.sleep(for: .seconds(60))  // until the close
            }
        }
        #expect(count.withLockedValue { $0 } == "2500")
        let status = ended?.closeStatus
        #expect(status?.code == .goingAway && status?.initiator == .peer)
        #expect(status?.reason == "server shutting down")

        let log = await server.stopped()
        #expect(server.process.terminationReason == .exit && server.process.terminationStatus == 0, "\(log)")
        #expect(log.contains("stopped"), "\(log)")
    }
}
