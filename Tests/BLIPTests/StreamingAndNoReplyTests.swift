import BLIP
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

// Three minutes, not one: under ThreadSanitizer, beside the seeded sessions, a streamed reply took over 60 s once.
@Suite("No-reply, unhandled requests and streaming", .timeLimit(.minutes(3)))
struct StreamingAndNoReplyTests {
    @Test("a no-reply request runs its handler and gets no reply")
    func noReply() async throws {
        let (stream, seen) = AsyncStream.makeStream(of: String.self)
        var router = BLIPRouter()
        router.register(profile: "note") { request, context in
            #expect(!context.expectsReply)
            seen.yield(String(buffer: request.body))
            return BLIPResponse(text: "ignored")
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            try await connection.sendNoReply(BLIPRequest(profile: "note", text: "hello"))
            var iterator = stream.makeAsyncIterator()
            #expect(await iterator.next() == "hello")
            // The next request still works: numbering and state are consistent.
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "x")) }
        }
    }

    @Test("unhandled requests are delivered and answered; one dropped unanswered gets BLIP/501")
    func deliveredRequests() async throws {
        var configuration = BLIPConnection.Configuration()
        configuration.unhandledRequests = .deliver
        let peers = InMemoryPeers(router: BLIPRouter(), serverConfiguration: configuration)
        let server = peers.serverConnection
        let answering = Task {
            var count = 0
            for await incoming in server.incomingRequests {
                count += 1
                if incoming.request.profile == "answer" {
                    try incoming.respond(BLIPResponse(text: "answered \(incoming.number)"))
                    #expect(throws: BLIPConnectionError.self) { try incoming.respond(BLIPResponse()) }
                }
                // Others are dropped here without a reply.
                if count == 2 { return }
            }
        }
        try await peers.run { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "answer"))
            #expect(String(buffer: reply.body) == "answered 1")
            let error = await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "drop"))
            }
            #expect(error?.code == .handlerFailed)
        }
        try await answering.value
    }

    @Test("a body streamed out from an AsyncSequence, received by a streaming handler", arguments: BLIPDialect.allCases)
    func streamedBothWays(dialect: BLIPDialect) async throws {
        var router = BLIPRouter()
        router.registerStreaming(profile: "upload") { request, _ in
            var total = 0
            var checksum: UInt32 = 0
            for try await piece in request.body {
                checksum = rollingSum(checksum, piece)
                total += piece.readableBytes
            }
            return BLIPResponse(properties: ["Count": "\(total)", "Sum": "\(checksum)"])
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let peers = InMemoryPeers(dialect: dialect, router: router)
        let total = 1 << 20  // several windows' worth
        try await peers.run { connection in
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "upload", compressed: true),
                body: ChunkedBody(total: total, chunk: 40_000)
            )
            var expected: UInt32 = 0
            var offset = 0
            for try await piece in ChunkedBody(total: total, chunk: 40_000) {
                expected = rollingSum(expected, piece)
                offset += piece.readableBytes
            }
            #expect(reply.properties["Count"] == "\(total)")
            #expect(reply.properties["Sum"] == "\(expected)")
            // Whole-body handlers work alongside streaming ones.
            let echoed = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(200_000)))
            #expect(echoed.body == pattern(200_000))
        }
    }

    /// Regression: with a streaming handler registered, request bodies are consumed by hand, and a whole-body
    /// request's pieces after the first were counted as 0 bytes consumed, so no ACK went out and a sender
    /// limited to a fixed window waited forever.
    @Test("a whole-body request larger than the window, next to a streaming handler, is ACKed and answered")
    func wholeBodyBesideStreamingHandler() async throws {
        var router = BLIPRouter()
        router.registerStreaming(profile: "upload") { request, _ in
            for try await _ in request.body {}
            return BLIPResponse()
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        var configuration = BLIPConnection.Configuration()
        configuration.sendWindow = .fixed(128_000)
        let peers = InMemoryPeers(router: router, serverConfiguration: configuration)
        try await peers.run(clientConfiguration: configuration) { connection in
            let body = pattern(1 << 20)
            let echoed = try await connection.sendRequest(BLIPRequest(profile: "echo", body: body))
            #expect(echoed.body == body)
        }
    }

    @Test("a streamed reply is read piece by piece; an unread one holds the sender back")
    func streamedReply() async throws {
        var router = BLIPRouter()
        router.register(profile: "download") { _, _ in BLIPResponse(body: pattern(5 << 20)) }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let reply = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "download"))
            var received = ByteBuffer()
            var pieces = 0
            for try await var piece in reply.body {
                received.writeBuffer(&piece)
                pieces += 1
            }
            #expect(received == pattern(5 << 20))
            #expect(pieces > 10)
            // A streamed reply that is dropped unread does not stall the connection.
            _ = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "download"))
            let again = try await connection.sendRequest(BLIPRequest(profile: "download"))
            #expect(again.body.readableBytes == 5 << 20)
        }
    }
}

@Suite("Cancellation and closing", .timeLimit(.minutes(3)))
struct CancellationAndCloseTests {
    @Test("cancelling a waiting request throws CancellationError and leaves the connection consistent")
    func cancelWaiting() async throws {
        let release = NIOLockedValueBox<CheckedContinuation<Void, Never>?>(nil)
        var router = BLIPRouter()
        router.register(profile: "slow") { _, _ in
            await withCheckedContinuation { continuation in release.withLockedValue { $0 = continuation } }
            return BLIPResponse(text: "late")
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let waiting = Task { try await connection.sendRequest(BLIPRequest(profile: "slow")) }
            while release.withLockedValue({ $0 == nil }) { await Task.yield() }
            waiting.cancel()
            await #expect(throws: CancellationError.self) { try await waiting.value }
            // The late reply is dropped; other requests work before and after it.
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still fine"))
            #expect(String(buffer: reply.body) == "still fine")
            release.withLockedValue { $0?.resume() }
            let after = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
            #expect(String(buffer: after.body) == "after")
        }
    }

    @Test("a request cancelled before it runs is never sent")
    func cancelBeforeSend() async throws {
        let count = NIOLockedValueBox(0)
        var router = BLIPRouter()
        router.register(profile: "count") { _, _ in
            count.withLockedValue { $0 += 1 }
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let task = Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await connection.sendRequest(BLIPRequest(profile: "count"))
            }
            await #expect(throws: CancellationError.self) { try await task.value }
            _ = try await connection.sendRequest(BLIPRequest(profile: "count"))
        }
        #expect(count.withLockedValue { $0 } == 1)
    }

    @Test(
        "closing fails every pending request at once; a cut link fails them as transport failures",
        arguments: [false, true]
    )
    func closeFailsPending(cut: Bool) async throws {
        var router = BLIPRouter()
        router.register(profile: "never") { _, _ in
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        let server = peers.serverConnection
        let serverRun = Task { await server.run() }
        let client = BLIPConnection(transport: peers.client)
        let clientRun = Task { await client.run() }
        let pending = (0..<5).map { _ in Task { try await client.sendRequest(BLIPRequest(profile: "never")) } }
        try await Task.sleep(for: .milliseconds(50))
        if cut { peers.client.cut() } else { await client.close() }
        for request in pending {
            let error = await #expect(throws: BLIPConnectionError.self) { try await request.value }
            #expect(error?.code == (cut ? .transportFailed : .connectionClosed))
        }
        await #expect(throws: BLIPConnectionError.self) { try await client.sendRequest(BLIPRequest(profile: "x")) }
        await client.close()
        await server.close()
        serverRun.cancel()
        _ = await clientRun.value
        _ = await serverRun.value
        #expect(client.isClosed && server.isClosed)
    }
}

/// A order-sensitive sum of `buffer`'s bytes continuing from `sum`, over raw bytes: a ByteBufferView a byte at
/// a time takes seconds per megabyte in a debug build, on the threads every suite's tasks share.
private func rollingSum(_ sum: UInt32, _ buffer: ByteBuffer) -> UInt32 {
    buffer.withUnsafeReadableBytes { bytes in
        var sum = sum
        for byte in bytes { sum = sum &* 31 &+ UInt32(byte) }
        return sum
    }
}
