import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// Progress reports of outgoing requests (``BLIPMessageProgress``) over an in-memory pair. How every ending
/// reports its final state is in the exactly-once table (ExactlyOnceTableTests).
@Suite("Progress of outgoing requests", .timeLimit(.minutes(2)))
struct ProgressTests {
    static func router() -> BLIPRouter {
        var router = StreamedReplyTests.router(meter: BodyMeter())
        router.register(profile: "sink") { request, _ in BLIPResponse(text: "\(request.body.readableBytes)") }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        return router
    }

    @Test("a large request and its reply pass through every stage; ACKs are counted", arguments: [1, 8])
    func everyStage(multiple: Int) async throws {
        let size = multiple * 300_000
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "echo", body: pattern(size)),
                progress: log.record
            )
            #expect(reply.body.readableBytes == size)
            await log.check(endsIn: .complete)
            let reports = log.all
            let stages = reports.map(\.state).reduce(into: [BLIPMessageProgress.State]()) { stages, state in
                if stages.last != state { stages.append(state) }
            }
            #expect(stages == [.queued, .sending, .awaitingReply, .receivingReply, .complete], "\(stages)")
            let last = try #require(reports.last)
            // The properties block, the body and a 4-byte checksum per frame of at most 16 KiB.
            #expect(last.bytesSent > size && last.bytesSent < size + size / 4_000 + 100, "\(last)")
            #expect(last.replyBytesReceived == size)
            // ACKs come every 50 000 bytes while the request is still being sent.
            #expect(last.bytesAcknowledged >= 50_000 && last.bytesAcknowledged < last.bytesSent, "\(last)")
            #expect(connection.core.pendingBookkeeping == 0)
        }
    }

    @Test("the seed dialect has no ACKs: nothing is acknowledged, the rest is reported")
    func seedHasNoACKs() async throws {
        let peers = InMemoryPeers(dialect: .seed, router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            _ = try await connection.sendRequest(
                BLIPRequest(profile: "sink", body: pattern(200_000)),
                progress: log.record
            )
            await log.check(endsIn: .complete)
            let last = try #require(log.all.last)
            #expect(last.bytesAcknowledged == 0 && last.bytesSent > 200_000 && last.replyBytesReceived == 6)
        }
    }

    @Test("a streamed reply reports until its last frame arrived, after the call returned")
    func streamedReply() async throws {
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            let reply = try await connection.sendRequestStreamingReply(
                StreamedReplyTests.download(2_000_000),
                progress: log.record
            )
            #expect(!(log.all.last?.state.isFinal ?? false), "complete before the body was read: \(log.all)")
            let body = try await reply.body.collect(upTo: 4 << 20)
            #expect(body.readableBytes == 2_000_000)
            await log.check(endsIn: .complete)
            #expect(log.all.last?.replyBytesReceived == 2_000_000)
            #expect(connection.core.pendingBookkeeping == 0)
        }
    }

    @Test("a streamed reply whose body is dropped unread fails")
    func droppedStreamedReply() async throws {
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            do {
                let reply = try await connection.sendRequestStreamingReply(
                    StreamedReplyTests.download(2_000_000),
                    progress: log.record
                )
                var iterator = reply.body.makeAsyncIterator()
                _ = try await iterator.next()
            }
            await log.check(endsIn: .failed)
            // The connection goes on.
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still here"))
        }
    }

    @Test("a no-reply request is complete once its last frame has left")
    func noReply() async throws {
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            try await connection.sendNoReply(BLIPRequest(profile: "sink", body: pattern(100_000)), progress: log.record)
            await log.check(endsIn: .complete)
            let last = try #require(log.all.last)
            #expect(last.bytesSent > 100_000 && last.replyBytesReceived == 0)
        }
    }

    @Test("a streamed request body: bytes sent grow with each piece")
    func streamedBody() async throws {
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "sink"),
                body: ChunkedBody(total: 500_000, chunk: 20_000),
                progress: log.record
            )
            #expect(String(buffer: reply.body) == "500000")
            await log.check(endsIn: .complete)
            let sending = log.all.filter { $0.state == .sending }.map(\.bytesSent)
            #expect(sending.count >= 10 && sending.last! > 400_000, "\(sending)")
        }
    }

    /// The handler runs on the connection's thread with no lock held: cancelling its own request from it
    /// (which reports again) must neither deadlock nor report twice.
    @Test("a progress handler that cancels its own request gets one final report")
    func handlerCancels() async throws {
        let peers = InMemoryPeers(router: Self.router())
        try await peers.run { connection in
            let log = ProgressLog()
            let call = NIOLockedValueBox<Task<BLIPResponse, any Error>?>(nil)
            let (stored, storing) = AsyncStream.makeStream(of: Never.self)
            let task = Task {
                for await _ in stored {}  // until the handler can find this task
                return try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(1_000_000))) {
                    progress in
                    log.record(progress)
                    if progress.state == .sending { call.withLockedValue { $0?.cancel() } }
                }
            }
            call.withLockedValue { $0 = task }
            storing.finish()
            await #expect(throws: CancellationError.self) { try await task.value }
            await log.check(endsIn: .failed)
            // Cancelled mid-message: the message was still sent whole (BLIP cannot abort one) and its reply
            // dropped; nothing is left of it.
            for _ in 0..<500 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(connection.core.pendingBookkeeping == 0)
        }
    }
}
