import BLIP
import BLIPWebSocket
import NIOCore
import NIOPosix
import Testing

/// `BLIPConnection.taskExecutor`: a WebSocket connection's event loop as a task executor.
@Suite("The connection's task executor", .timeLimit(.minutes(2)))
struct TaskExecutorTests {
    /// Loops of its own, so that "on one of them" means this test's connection.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)

    @Test("code preferring it runs on the connection's event loop, before and after each reply")
    func runsOnTheEventLoop() async throws {
        let group = Self.group
        try await withServer(eventLoopGroup: group) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.connectTimeout = .seconds(30)
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: configuration,
                eventLoopGroup: group
            ) { connection in
                let executor = try #require(connection.taskExecutor)
                // Outside the preference this task runs on Swift's pool, not on one of the group's loops.
                #expect(MultiThreadedEventLoopGroup.currentEventLoop == nil)
                try await withTaskExecutorPreference(executor) {
                    let loop = try #require(MultiThreadedEventLoopGroup.currentEventLoop)
                    for index in 0..<100 {
                        let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "\(index)"))
                        #expect(String(buffer: reply.body) == "\(index)")
                        // Resumed by the reply on the same loop, every time.
                        #expect(MultiThreadedEventLoopGroup.currentEventLoop === loop)
                    }
                    // Concurrent requests from child tasks, which inherit the preference.
                    try await withThrowingTaskGroup(of: Bool.self) { tasks in
                        for index in 0..<64 {
                            tasks.addTask {
                                let reply = try await connection.sendRequest(
                                    BLIPRequest(profile: "echo", text: "\(index)")
                                )
                                return String(buffer: reply.body) == "\(index)"
                                    && MultiThreadedEventLoopGroup.currentEventLoop === loop
                            }
                        }
                        for try await matched in tasks { #expect(matched) }
                    }
                }
            }
        }
    }

    @Test("a transport without a thread of its own has none")
    func inMemoryHasNone() {
        let (client, _) = BLIPInMemoryTransport.makePair()
        #expect(BLIPConnection(transport: client).taskExecutor == nil)
    }
}
