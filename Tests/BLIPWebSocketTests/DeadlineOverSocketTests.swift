import BLIPTestSupport
import BLIPWebSocket
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import BLIP

/// Request timeouts on a WebSocket connection, where each deadline is a task scheduled on the connection's
/// event loop (ConnectionCore+Deadlines) rather than a sleeping task: every send API still ends once, with
/// `.timedOut`, and leaves nothing behind.
@Suite("Request deadlines on a WebSocket connection", .timeLimit(.minutes(2)))
struct DeadlineOverSocketTests {
    static func router(release: Release) -> BLIPRouter {
        var router = standardRouter()
        router.registerSlow(until: release)
        return router
    }

    static func waitForNoBookkeeping(_ connection: BLIPConnection) async throws {
        for _ in 0..<2_000 where connection.core.pendingBookkeeping > 0 {
            try await Task.sleep(for: .milliseconds(5))
        }
    }

    @Test("each send API times out with .timedOut on the event loop's timer; late replies are dropped")
    func timesOut() async throws {
        let release = Release()
        try await withServer(router: Self.router(release: release)) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                #expect(connection.core.loopIsolation != nil, "the deadline runs on the connection's event loop")
                let slow = BLIPRequest(profile: "slow")
                let whole = await #expect(throws: BLIPConnectionError.self) {
                    try await connection.sendRequest(slow, timeout: .milliseconds(50))
                }
                #expect(whole?.code == .timedOut)
                let streamed = await #expect(throws: BLIPConnectionError.self) {
                    try await connection.sendRequestStreamingReply(slow, timeout: .milliseconds(50))
                }
                #expect(streamed?.code == .timedOut)
                let callback = NIOLockedValueBox<[Result<BLIPResponse, any Error>]>([])
                connection.sendRequest(slow, timeout: .milliseconds(50)) { result in
                    callback.withLockedValue { $0.append(result) }
                }
                for _ in 0..<2_000 where callback.withLockedValue({ $0.isEmpty }) {
                    try await Task.sleep(for: .milliseconds(5))
                }
                guard case .failure(let error as BLIPConnectionError) = callback.withLockedValue({ $0.first }) else {
                    Issue.record("the callback got \(callback.withLockedValue { $0 })")
                    return
                }
                #expect(error.code == .timedOut)
                release.open()
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "echo", text: "x"),
                    timeout: .seconds(30)
                )
                #expect(String(buffer: reply.body) == "x")
                try await Self.waitForNoBookkeeping(connection)
                #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
                #expect(callback.withLockedValue { $0.count } == 1)
            }
        }
    }

    @Test("deadlines racing replies: each request ends exactly once, and nothing is left")
    func racingReplies() async throws {
        try await withServer { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                let outcomes = await withTaskGroup(of: String.self) { group in
                    for index in 0..<300 {
                        group.addTask {
                            do {
                                let reply = try await connection.sendRequest(
                                    BLIPRequest(profile: "echo", text: "\(index)"),
                                    timeout: .microseconds(Int64(index % 30) * 100)
                                )
                                return String(buffer: reply.body) == "\(index)" ? "reply" : "wrong reply"
                            } catch let error as BLIPConnectionError where error.code == .timedOut {
                                return "timeout"
                            } catch {
                                return "unexpected \(error)"
                            }
                        }
                    }
                    return await group.reduce(into: [String]()) { $0.append($1) }
                }
                #expect(outcomes.count == 300)
                #expect(outcomes.allSatisfy { $0 == "reply" || $0 == "timeout" }, "\(Set(outcomes))")
                #expect(outcomes.contains("timeout"), "a deadline of 0 expires before any reply")
                try await Self.waitForNoBookkeeping(connection)
                #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
                let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
                #expect(String(buffer: reply.body) == "after")
            }
        }
    }
}
