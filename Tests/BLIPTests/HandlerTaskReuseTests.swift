import BLIPTestSupport
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import BLIP

/// A task that ran an async handler stays for the next request (a few of them at most) instead of a task
/// per request, lets go of what it ran, and ends with the connection.
@Suite("Handler tasks wait for the next request", .timeLimit(.minutes(2)))
struct HandlerTaskReuseTests {
    static func idleTasks(_ connection: BLIPConnection) -> Int {
        connection.core.state.withLockedValue { $0.idleHandlerTasks.count }
    }

    static func echoRouter() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        return router
    }

    @Test("sequential requests to an async handler are run by one task, which waits between them")
    func sequentialRequestsShareATask() async throws {
        let peers = InMemoryPeers(router: Self.echoRouter())
        try await peers.run { client in
            for index in 0..<50 {
                let reply = try await client.sendRequest(BLIPRequest(profile: "echo", text: "\(index)"))
                #expect(String(buffer: reply.body) == "\(index)")
                // The task parks just after its reply leaves.
                try await waitUntil { Self.idleTasks(peers.serverConnection) == 1 }
            }
        }
        #expect(Self.idleTasks(peers.serverConnection) == 0, "the close lets every waiting task end")
    }

    @Test("after a burst, at most maximumIdleHandlerTasks tasks wait; the rest end")
    func burstLeavesABoundedNumberWaiting() async throws {
        let gate = Gate()
        let started = NIOLockedValueBox(0)
        var router = BLIPRouter()
        router.register(profile: "held") { _, _ in
            started.withLockedValue { $0 += 1 }
            await gate.wait()
            return BLIPResponse(text: "done")
        }
        let peers = InMemoryPeers(router: router)
        let burst = ConnectionCore.maximumIdleHandlerTasks * 3
        try await peers.run { client in
            try await withThrowingTaskGroup(of: String.self) { group in
                for _ in 0..<burst {
                    group.addTask { String(buffer: try await client.sendRequest(BLIPRequest(profile: "held")).body) }
                }
                try await waitUntil { started.withLockedValue { $0 } == burst }
                gate.open()
                for try await reply in group { #expect(reply == "done") }
            }
            try await waitUntil {
                peers.serverConnection.core.state.withLockedValue { $0.runningHandlers == 0 }
                    && Self.idleTasks(peers.serverConnection) == ConnectionCore.maximumIdleHandlerTasks
            }
            // And they serve the next requests.
            for _ in 0..<3 {
                #expect(String(buffer: try await client.sendRequest(BLIPRequest(profile: "held")).body) == "done")
            }
        }
        #expect(Self.idleTasks(peers.serverConnection) == 0)
    }

    @Test("a waiting task keeps nothing of the request it ran: an unread body stream goes at once")
    func waitingTaskLetsGoOfItsRequest() async throws {
        var router = BLIPRouter()
        router.registerStreaming(profile: "ignore") { _, _ in BLIPResponse(text: "early") }
        let peers = InMemoryPeers(router: router)
        let server = peers.serverConnection
        try await peers.run { client in
            // The first request goes to a new task, the others to the one waiting.
            for _ in 0..<3 {
                let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)
                let upload = Task { try await client.sendRequest(BLIPRequest(profile: "ignore"), body: body) }
                pieces.yield(ByteBuffer(repeating: 1, count: 1000))
                pieces.finish()
                #expect(String(buffer: try await upload.value.body) == "early")
                try await waitUntil { Self.idleTasks(server) == 1 }
                try await waitUntil { server.core.state.withLockedValue { $0.streams.isEmpty } }
                try await waitUntil { server.core.pendingBookkeeping == 0 }
            }
        }
    }

    enum Ending: String, CaseIterable, Sendable {
        case localClose, peerClose, transportFailure
    }

    @Test("however the connection ends, the waiting tasks end and the run returns", arguments: Ending.allCases)
    func everyEndingEndsWaitingTasks(ending: Ending) async throws {
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair()
        let server = BLIPConnection(transport: serverTransport, router: Self.echoRouter())
        let serverRun = Task { await server.run() }
        let client = BLIPConnection(transport: clientTransport)
        let clientRun = Task { await client.run() }
        _ = try await client.sendRequest(BLIPRequest(profile: "echo", text: "one"))
        try await waitUntil { Self.idleTasks(server) == 1 }
        switch ending {
        case .localClose: await server.close()
        case .peerClose: await client.close()
        case .transportFailure: clientTransport.cut()
        }
        try await waitUntil { server.isClosed }
        #expect(Self.idleTasks(server) == 0)
        _ = await serverRun.value
        await client.close()
        _ = await clientRun.value
    }

    @Test("cancelling the connection's run ends the waiting tasks")
    func cancelledRunEndsWaitingTasks() async throws {
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair()
        let server = BLIPConnection(transport: serverTransport, router: Self.echoRouter())
        let serverRun = Task { await server.run() }
        try await withBLIPConnection(over: clientTransport) { client in
            _ = try await client.sendRequest(BLIPRequest(profile: "echo", text: "one"))
            try await waitUntil { Self.idleTasks(server) == 1 }
            serverRun.cancel()
            try await waitUntil { Self.idleTasks(server) == 0 }
        }
        await server.close()
        _ = await serverRun.value
    }
}
