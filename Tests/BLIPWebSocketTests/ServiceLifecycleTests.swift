import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import ServiceLifecycleTestKit
import Testing

/// The server as a swift-service-lifecycle `Service`: graceful shutdown drains, cancellation stops at once.
@Suite("Server in a ServiceGroup", .timeLimit(.minutes(2)))
struct ServiceLifecycleTests {
    /// A server on a free port whose `slow` handler answers once `gate` opens.
    static func server(gate: Gate) async throws -> BLIPWebSocketServer {
        var router = standardRouter()
        router.register(profile: "slow") { _, _ in
            await gate.wait()
            return BLIPResponse(text: "finished")
        }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        configuration.drainTimeout = .seconds(60)
        return try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
    }

    static func clientConfiguration() -> BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        return configuration
    }

    /// What ended a client session that only the server's close can end.
    static func sessionEnd(
        _ session: () async throws -> Void,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async -> BLIPConnectionError? {
        do {
            try await session()
            Issue.record("the session ended without a close", sourceLocation: sourceLocation)
        } catch let error as BLIPConnectionError {
            return error
        } catch {
            Issue.record("the session ended with \(error)", sourceLocation: sourceLocation)
        }
        return nil
    }

    @Test("graceful shutdown: no new connections or requests, the one in flight is answered, then 1001")
    func gracefulShutdown() async throws {
        let gate = Gate()
        let server = try await Self.server(gate: gate)
        let url = "ws://127.0.0.1:\(server.port)/"
        let reply = NIOLockedValueBox<String?>(nil)
        try await testGracefulShutdown { trigger in
            let group = ServiceGroup(services: [server], logger: Logger(label: "test.service-group"))
            async let running: Void = group.run()

            let ended = await Self.sessionEnd {
                try await BLIPWebSocketClient.connect(to: url, configuration: Self.clientConfiguration()) {
                    connection in
                    let slow = connection.enqueueRequest(BLIPRequest(profile: "slow"))
                    // Queued after `slow`, so answered after the server has it (frames are read in order).
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "before"))

                    trigger.triggerGracefulShutdown()
                    let refusal = try await eventuallyThrown(BLIPError.self) {
                        _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
                    }
                    #expect(refusal?.code == .busy)
                    // The listener is closed: a new client cannot connect.
                    await #expect(throws: (any Error).self) {
                        try await BLIPWebSocketClient.connect(to: url, configuration: Self.clientConfiguration()) {
                            _ in
                        }
                    }
                    #expect(server.openConnectionCount == 1)

                    gate.open()
                    let answer = String(buffer: try await slow.reply().body)
                    reply.withLockedValue { $0 = answer }
                    try await Task.sleep(for: .seconds(60))  // until the server closes the session
                }
            }
            #expect(reply.withLockedValue { $0 } == "finished")
            #expect(ended?.closeStatus?.code == .goingAway && ended?.closeStatus?.initiator == .peer)
            try await running  // the group ends once the server's connections have closed
            #expect(server.openConnectionCount == 0)
        }
    }

    @Test("cancellation: the server stops at once, closing with 1000, and the group returns")
    func cancellation() async throws {
        let gate = Gate()  // never opened: the request stays in flight
        let server = try await Self.server(gate: gate)
        let group = ServiceGroup(services: [server], logger: Logger(label: "test.service-group"))
        let running = Task { try await group.run() }
        let ended = await Self.sessionEnd {
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: Self.clientConfiguration()
            ) { connection in
                let slow = connection.enqueueRequest(BLIPRequest(profile: "slow"))
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "before"))
                running.cancel()
                await #expect(throws: BLIPConnectionError.self) { try await slow.reply() }
                try await Task.sleep(for: .seconds(60))
            }
        }
        #expect(ended?.closeStatus?.code == .normalClosure && ended?.closeStatus?.initiator == .peer)
        gate.open()  // the handler ignores cancellation; the group returns once it has
        try await running.value
        #expect(server.openConnectionCount == 0)
    }
}
