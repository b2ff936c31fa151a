import BLIP
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import BLIPWebSocket

/// Close codes over a real WebSocket: what the closing side chose is what the other side and every pending
/// request see, typed.
@Suite("Close status over WebSocket", .timeLimit(.minutes(3)))
struct CloseStatusOverWebSocketTests {
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    static func router() -> BLIPRouter {
        var router = standardRouter()
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        router.register(profile: "kick") { request, context in
            let connection = context.connection
            let reason = String(buffer: request.body)
            Task { await connection.close(code: 4001, reason: reason) }
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        return router
    }

    @Test("a handler closes with 4001: every pending client request fails once with it; the session ends itself")
    func serverClosesWithApplicationCode() async throws {
        try await withServer(router: Self.router(), eventLoopGroup: Self.group) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.heartbeatInterval = nil
            let outcomes = Outcomes()
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(
                    to: "ws://127.0.0.1:\(server.port)/",
                    configuration: configuration,
                    eventLoopGroup: Self.group
                ) { connection in
                    // Twenty requests that only the close ends, then the kick.
                    await withTaskGroup(of: Void.self) { group in
                        for _ in 0..<20 {
                            group.addTask {
                                do {
                                    _ = try await connection.sendRequest(BLIPRequest(profile: "hold"))
                                    outcomes.list.withLockedValue { $0.append("reply") }
                                } catch let error as BLIPConnectionError {
                                    let status = error.closeStatus
                                    outcomes.list.withLockedValue {
                                        $0.append(
                                            "\(status?.initiator.description ?? "-") \(status?.code.rawValue ?? 0) \(status?.reason ?? "")"
                                        )
                                    }
                                } catch {
                                    outcomes.list.withLockedValue { $0.append("other \(error)") }
                                }
                            }
                        }
                        group.addTask {
                            try? await Task.sleep(for: .milliseconds(100))
                            try? await connection.sendNoReply(BLIPRequest(profile: "kick", text: "session revoked"))
                        }
                    }
                    // Waits for pushes that will never come: the close must end this.
                    try await Task.sleep(for: .seconds(3600))
                }
            }
            let status = try #require(error?.closeStatus)
            #expect(status.code == 4001 && status.reason == "session revoked" && status.initiator == .peer)
            let seen = outcomes.list.withLockedValue { $0 }
            #expect(seen.count == 20)
            #expect(Set(seen) == ["peer 4001 session revoked"])
        }
    }

    @Test("the server closes a connection from outside with 1001; the client reads the code")
    func closeFromOutside() async throws {
        let accepted = NIOLockedValueBox<BLIPConnection?>(nil)
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.port = 0
        let server = try await BLIPWebSocketServer.bind(
            configuration: serverConfiguration,
            router: Self.router(),
            eventLoopGroup: Self.group
        )
        async let serving: Void = server.run { connection in accepted.withLockedValue { $0 = connection.connection } }
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            eventLoopGroup: Self.group
        )
        let client = BLIPConnection(transport: transport)
        async let clientRun = client.run()
        _ = try await client.sendRequest(BLIPRequest(profile: "echo"))
        let serverSide = try #require(accepted.withLockedValue { $0 })
        let local = await serverSide.close(code: .goingAway, reason: "maintenance")
        #expect(local.initiator == .local && local.code == .goingAway && local.isNormal)
        let remote = await clientRun
        #expect(remote.initiator == .peer && remote.code == .goingAway && remote.reason == "maintenance")
        #expect(remote.isNormal && remote.isTransient)
        await server.close()
        await serving
    }
}

/// What each request ended with, from the tasks that sent them.
final class Outcomes: Sendable {
    let list = NIOLockedValueBox<[String]>([])
}
