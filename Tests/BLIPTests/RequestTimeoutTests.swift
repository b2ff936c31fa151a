import BLIPTestSupport
import NIOCore
import Testing

@testable import BLIP

/// Per-request timeouts: a typed error, then the cancellation rules; never two outcomes.
@Suite("Request timeouts", .timeLimit(.minutes(3)))
struct RequestTimeoutTests {
    static func slowRouter(release: Release) -> BLIPRouter {
        var router = standardRouter()
        router.registerSlow(until: release)
        return router
    }

    @Test("each send API times out with .timedOut; the late reply is dropped and the connection goes on")
    func timesOut() async throws {
        let release = Release()
        let peers = InMemoryPeers(router: Self.slowRouter(release: release))
        try await peers.run { connection in
            let slow = BLIPRequest(profile: "slow")
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await connection.sendRequest(slow, timeout: .milliseconds(50))
            }
            #expect(error?.code == .timedOut)
            await #expect(throws: BLIPConnectionError.self) {
                try await connection.sendRequestStreamingReply(slow, timeout: .milliseconds(50))
            }
            // Long enough for the whole body to leave first: a streamed body cut short by its timeout would
            // end the connection (a started message cannot be aborted), which is not what this checks.
            await #expect(throws: BLIPConnectionError.self) {
                try await connection.sendRequest(
                    slow,
                    body: ChunkedBody(total: 10_000, chunk: 10_000),
                    timeout: .seconds(2)
                )
            }
            release.open()
            // The late replies arrive and are dropped; the connection still works and forgets them all.
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "x"), timeout: .seconds(30))
            #expect(String(buffer: reply.body) == "x")
            for _ in 0..<2_000 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
        }
    }

    @Test("the configuration's requestTimeout applies to every request that sets none")
    func configuredTimeout() async throws {
        let release = Release()
        let peers = InMemoryPeers(router: Self.slowRouter(release: release))
        var configuration = BLIPConnection.Configuration()
        configuration.requestTimeout = .milliseconds(50)
        try await peers.run(clientConfiguration: configuration) { connection in
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "slow"))
            }
            #expect(error?.code == .timedOut)
            // A request's own timeout wins.
            release.open()
            _ = try await connection.sendRequest(BLIPRequest(profile: "slow"), timeout: .seconds(30))
        }
    }

    @Test("a timeout racing a reply resolves each request exactly once, and leaves nothing behind")
    func racingReplies() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
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
            for _ in 0..<2_000 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
            #expect(String(buffer: reply.body) == "after")
        }
    }
}
