import BLIPWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Testing

@testable import BLIP

/// A task with no actor running on its connection's own event loop, as NIO's global executor runs one (the
/// `blip` tool installs it), sends isolated to that loop (see EventLoopIsolation). Every way a send ends
/// still reaches it exactly once.
///
/// The tasks here start with `Task.immediate` from a callback of the loop: the test process does not
/// install NIO's global executor, so they run there as the generic executor, and entering the isolation
/// costs them a queued job instead of nothing (the saving itself is measured with callgrind, in
/// Docs/BenchmarkLog.md). `onLoop` says the send took the isolated path.
@Suite("Sending from a task on the connection's event loop", .timeLimit(.minutes(1)))
struct LoopIsolationTests {
    /// Starts `body` as a task on the loop's thread, with no actor and no executor preference; returns the
    /// task, whose value says whether the send could take the loop's isolation, and what it got.
    static func startOnLoop(
        _ loop: EventLoopIsolation,
        _ body: @escaping @Sendable () async -> String
    ) async -> Task<(onLoop: Bool, outcome: String), Never> {
        await withCheckedContinuation { started in
            loop.eventLoop.execute {
                let task = Task.immediate { () async -> (onLoop: Bool, outcome: String) in
                    let onLoop = loop.runsCurrentTask
                    return (onLoop, await body())
                }
                started.resume(returning: task)
            }
        }
    }

    static func describe(_ send: @Sendable () async throws -> BLIPResponse) async -> String {
        do {
            return "reply \(String(buffer: try await send().body))"
        } catch let error as BLIPError {
            return "ERR \(error.code.rawValue)"
        } catch let error as BLIPConnectionError {
            return "failed \(error.code)"
        } catch is CancellationError {
            return "cancelled"
        } catch {
            return "other \(error)"
        }
    }

    @Test("a reply, an ERR, a streamed reply, a cancelled request and a local close each end the send once")
    func everyEnding() async throws {
        let (handlerStarts, handlerStarted) = AsyncStream.makeStream(of: Void.self)
        var router = standardRouter()
        router.register(profile: "never") { _, _ in
            handlerStarted.yield()
            try await Task.sleep(for: .seconds(600))  // cancelled when the connection closes
            return BLIPResponse()
        }
        router.register(profile: "download") { _, _ in BLIPResponse(body: pattern(300_000)) }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { group.shutdownGracefully { _ in } }
        try await withServer(router: router, eventLoopGroup: group) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", eventLoopGroup: group) {
                connection in
                let loop = try #require(connection.core.loopIsolation)
                #expect(!loop.runsCurrentTask, "a test's own task runs on Swift's pool")
                var started = handlerStarts.makeAsyncIterator()

                let echo = await Self.startOnLoop(loop) {
                    await Self.describe { try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi")) }
                }.value
                #expect(echo.onLoop && echo.outcome == "reply hi")

                let error = await Self.startOnLoop(loop) {
                    await Self.describe { try await connection.sendRequest(BLIPRequest(profile: "error")) }
                }.value
                #expect(error.onLoop && error.outcome == "ERR 409")

                // The streamed reply's send takes the isolation; the reads of its pieces that follow run
                // where the task resumed (Swift's pool here) and take the ordinary path.
                let streamed = await Self.startOnLoop(loop) {
                    do {
                        let reply = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "download"))
                        var body = ByteBuffer()
                        for try await var piece in reply.body { body.writeBuffer(&piece) }
                        return body == pattern(300_000) ? "streamed whole" : "streamed \(body.readableBytes) bytes"
                    } catch {
                        return "failed \(error)"
                    }
                }.value
                #expect(streamed.onLoop && streamed.outcome == "streamed whole")

                let cancelled = await Self.startOnLoop(loop) {
                    await Self.describe { try await connection.sendRequest(BLIPRequest(profile: "never")) }
                }
                _ = await started.next()
                cancelled.cancel()
                let cancelledResult = await cancelled.value
                #expect(cancelledResult.onLoop && cancelledResult.outcome == "cancelled")

                let closed = await Self.startOnLoop(loop) {
                    await Self.describe { try await connection.sendRequest(BLIPRequest(profile: "never")) }
                }
                _ = await started.next()
                await connection.close()
                let closedResult = await closed.value
                #expect(closedResult.onLoop && closedResult.outcome == "failed connectionClosed")
                #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
            }
        }
    }

    @Test("a task that prefers the connection's task executor is not isolated to the loop: it runs there already")
    func preferredExecutorKeepsItsPath() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { group.shutdownGracefully { _ in } }
        try await withServer(eventLoopGroup: group) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", eventLoopGroup: group) {
                connection in
                let loop = try #require(connection.core.loopIsolation)
                let (onLoopThread, isolated) = await Task(executorPreference: connection.taskExecutor) {
                    (loop.eventLoop.inEventLoop, loop.runsCurrentTask)
                }.value
                #expect(onLoopThread && !isolated)
                let reply = try await Task(executorPreference: connection.taskExecutor) {
                    try await connection.sendRequest(BLIPRequest(profile: "echo", text: "preferred"))
                }.value
                #expect(String(buffer: reply.body) == "preferred")
            }
        }
    }
}
