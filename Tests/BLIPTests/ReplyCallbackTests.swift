import Foundation
import InMemoryTracing
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import Testing
import Tracing

@testable import BLIP

/// `sendRequest(_:timeout:progress:onReply:)` beyond the exactly-once table (ExactlyOnceTableTests): what
/// a caller driven by its callbacks does, and what it must be able to rely on.
@Suite("Reply callbacks", .timeLimit(.minutes(2)))
struct ReplyCallbackTests {
    /// Waits for `onReply`'s outcomes: the first ends the wait; any later one is counted.
    final class Outcomes: Sendable {
        private let state = NIOLockedValueBox<
            (results: [Result<BLIPResponse, any Error>], waiter: CheckedContinuation<Void, Never>?)
        >(([], nil))

        @Sendable func record(_ result: Result<BLIPResponse, any Error>) {
            let waiter = self.state.withLockedValue { state in
                state.results.append(result)
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }

        var count: Int { self.state.withLockedValue { $0.results.count } }

        func first() async -> Result<BLIPResponse, any Error> {
            await withCheckedContinuation { continuation in
                let done = self.state.withLockedValue { state in
                    if state.results.isEmpty { state.waiter = continuation }
                    return !state.results.isEmpty
                }
                if done { continuation.resume() }
            }
            return self.state.withLockedValue { $0.results[0] }
        }
    }

    /// Each reply's callback sends the next request, from inside the callback: it must not run under the
    /// connection's lock (the next send takes it), nor wait for the caller.
    final class Chain: Sendable {
        private struct State {
            var sent = 0
            var replies: [String] = []
            var failure: String?
            var done: CheckedContinuation<Void, Never>?
        }

        let connection: BLIPConnection
        let total: Int
        private let state = NIOLockedValueBox(State())

        init(_ connection: BLIPConnection, total: Int) {
            self.connection = connection
            self.total = total
        }

        func run(inFlight: Int) async -> (replies: [String], failure: String?) {
            await withCheckedContinuation { continuation in
                let first = self.state.withLockedValue { state in
                    state.done = continuation
                    state.sent = min(inFlight, self.total)
                    return state.sent
                }
                for index in 0..<first { self.send(index) }
            }
            return self.state.withLockedValue { ($0.replies, $0.failure) }
        }

        private func send(_ index: Int) {
            self.connection.sendRequest(BLIPRequest(profile: "echo", text: "\(index)")) { result in
                let (next, done) = self.state.withLockedValue { state -> (Int?, CheckedContinuation<Void, Never>?) in
                    switch result {
                    case .success(let reply): state.replies.append(String(buffer: reply.body))
                    case .failure(let error): state.failure = state.failure ?? "\(error)"
                    }
                    if state.failure != nil || state.replies.count == self.total {
                        defer { state.done = nil }
                        return (nil, state.done)
                    }
                    guard state.sent < self.total else { return (nil, nil) }
                    state.sent += 1
                    return (state.sent - 1, nil)
                }
                done?.resume()
                if let next { self.send(next) }
            }
        }
    }

    @Test("requests sent from reply callbacks keep 16 in flight until 2 000 have been answered, each once")
    func sendsFromCallbacks() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
            let (replies, failure) = await Chain(connection, total: 2_000).run(inFlight: 16)
            #expect(failure == nil)
            #expect(replies.count == 2_000)
            #expect(Set(replies) == Set((0..<2_000).map { "\($0)" }), "every request answered once")
            #expect(connection.core.pendingBookkeeping == 0)
        }
    }

    @Test("on a closed connection onReply is called before sendRequest returns, with the close's error")
    func closedConnection() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        let connection = try await peers.run { connection in connection }
        let outcomes = Outcomes()
        connection.sendRequest(BLIPRequest(profile: "echo", text: "late"), onReply: outcomes.record)
        #expect(outcomes.count == 1)
        guard case .failure(let error as BLIPConnectionError) = await outcomes.first() else {
            Issue.record("expected a connection error")
            return
        }
        #expect(error.code == .connectionClosed)
        #expect(connection.core.pendingBookkeeping == 0)
    }

    @Test("cancelling after the reply, twice, or after the connection closed does nothing and leaves nothing")
    func lateCancels() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        let outcomes = Outcomes()
        let connection = try await peers.run { connection in
            let pending = connection.sendRequest(BLIPRequest(profile: "echo", text: "x"), onReply: outcomes.record)
            guard case .success(let reply) = await outcomes.first() else {
                Issue.record("expected a reply")
                return connection
            }
            #expect(String(buffer: reply.body) == "x")
            pending.cancel()
            pending.cancel()
            #expect(connection.core.pendingBookkeeping == 0)
            return connection
        }
        #expect(outcomes.count == 1)
        #expect(connection.core.pendingBookkeeping == 0)
    }

    @Test("a request timer fires once when nothing stops it, and never once stopped, before or after it starts")
    func requestTimer() async throws {
        let loop = NIOAsyncTestingEventLoop()
        let fired = NIOLockedValueBox(0)
        let unstopped = RequestTimer()
        unstopped.start(.milliseconds(20), on: loop) { fired.withLockedValue { $0 += 1 } }
        let stoppedAfterStart = RequestTimer()
        stoppedAfterStart.start(.milliseconds(20), on: loop) { fired.withLockedValue { $0 += 100 } }
        stoppedAfterStart.stop()
        // A callback request that failed as it was sent ends before its timer starts.
        let stoppedBeforeStart = RequestTimer()
        stoppedBeforeStart.stop()
        stoppedBeforeStart.start(.milliseconds(20), on: loop) { fired.withLockedValue { $0 += 10_000 } }
        await loop.advanceTime(by: .milliseconds(19))
        #expect(fired.withLockedValue { $0 } == 0)
        await loop.advanceTime(by: .milliseconds(1))
        #expect(fired.withLockedValue { $0 } == 1)
        await loop.advanceTime(by: .seconds(1))
        #expect(fired.withLockedValue { $0 } == 1)
        #expect(await unstopped.stopAndWait())
        #expect(await !stoppedAfterStart.stopAndWait())
        await loop.shutdownGracefully()
    }

    @Test("stopping a timer whose expiry is running waits for it to return (what it left can then be cleared)")
    func stopWaitsForExpiry() async throws {
        let entered = NIOLockedValueBox(false)
        let returned = NIOLockedValueBox(false)
        // No event loop: a task that sleeps, as on the in-memory transport.
        let timer = RequestTimer()
        timer.start(.milliseconds(1), on: nil) {
            entered.withLockedValue { $0 = true }
            usleep(200_000)
            returned.withLockedValue { $0 = true }
        }
        for _ in 0..<2_000 where !entered.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
        #expect(entered.withLockedValue { $0 })
        #expect(await timer.stopAndWait())
        #expect(returned.withLockedValue { $0 })
    }

    @Test("a callback request that times out fails with timedOut, ends its span so, and leaves nothing")
    func timedOut() async throws {
        let tracer = InMemoryTracer()
        var configuration = BLIPConnection.Configuration()
        configuration.tracing = .enabled(tracer: tracer, propagatesTraceContext: false)
        let gate = TracingTests.Gate()
        let peers = InMemoryPeers(router: TracingTests.router(gate: gate))
        try await peers.run(clientConfiguration: configuration) { connection in
            let outcomes = Outcomes()
            connection.sendRequest(BLIPRequest(profile: "wait"), timeout: .milliseconds(50), onReply: outcomes.record)
            guard case .failure(let error as BLIPConnectionError) = await outcomes.first() else {
                Issue.record("expected a connection error")
                return
            }
            #expect(error.code == .timedOut)
            gate.release()
            // The handler still answers (BLIP cannot cancel the peer's work); the reply is dropped.
            for _ in 0..<2_000 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(connection.core.pendingBookkeeping == 0)
            #expect(outcomes.count == 1)
        }
        let span = try #require(tracer.finishedSpans.first { $0.operationName == "wait" && $0.kind == .client })
        #expect(span.attributes["blip.outcome"]?.toSpanAttribute() == .string("timedOut"))
        #expect(tracer.activeSpans.isEmpty)
    }

    @Test("a traced request sent with a callback gets its client span, ended with the outcome")
    func traced() async throws {
        let tracer = InMemoryTracer()
        var configuration = BLIPConnection.Configuration()
        configuration.tracing = .enabled(tracer: tracer, propagatesTraceContext: true)
        let peers = InMemoryPeers(router: standardRouter(), serverConfiguration: configuration)
        try await peers.run(clientConfiguration: configuration) { connection in
            let replied = Outcomes()
            connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(100)), onReply: replied.record)
            _ = await replied.first()
            let refused = Outcomes()
            connection.sendRequest(
                BLIPRequest(profile: "error", properties: ["Want-Error-Code": "409"]),
                onReply: refused.record
            )
            _ = await refused.first()
        }
        let echo = try #require(tracer.finishedSpans.first { $0.operationName == "echo" && $0.kind == .client })
        #expect(echo.attributes["blip.outcome"]?.toSpanAttribute() == .string("reply"))
        #expect(echo.attributes["blip.reply.size"]?.toSpanAttribute() == .int64(100))
        let server = try #require(tracer.finishedSpans.first { $0.operationName == "echo" && $0.kind == .server })
        #expect(server.parentSpanID == echo.spanID, "the trace context went in the request")
        let error = try #require(tracer.finishedSpans.first { $0.operationName == "error" && $0.kind == .client })
        #expect(error.attributes["blip.outcome"]?.toSpanAttribute() == .string("error"))
        #expect(tracer.activeSpans.isEmpty)
    }
}
