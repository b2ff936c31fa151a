import BLIP
import BLIPWebSocket
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// A streamed reply over a real WebSocket on loopback: a large reply reaches a streaming reader while the
/// server never pulls its source far ahead of what the reader has read.
@Suite("Streamed replies over WebSocket", .timeLimit(.minutes(2)))
struct StreamedReplyOverSocketTests {
    /// The server runs on a loop of its own, as in ServerLimitsTests: the shared loops are busy with the
    /// other suites' transfers.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Produces `total` bytes in `chunk`-byte pieces (each piece one repeated byte, its index), counting
    /// what it produced.
    struct CountedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let total: Int
        let chunk: Int
        let produced: Produced

        func makeAsyncIterator() -> Iterator { Iterator(body: self) }

        struct Iterator: AsyncIteratorProtocol {
            let body: CountedBody
            var offset = 0

            mutating func next() async throws -> ByteBuffer? {
                guard self.offset < self.body.total else { return nil }
                let size = Swift.min(self.body.chunk, self.body.total - self.offset)
                let piece = ByteBuffer(repeating: UInt8(truncatingIfNeeded: self.offset / self.body.chunk), count: size)
                self.offset += size
                self.body.produced.count.add(size, ordering: .relaxed)
                return piece
            }
        }
    }

    final class Produced: Sendable {
        let count = Atomic<Int>(0)
    }

    @Test("a 64 MiB streamed reply consumed by a streaming reader, its source never far ahead")
    func largeStreamedReply() async throws {
        let total = 64 << 20
        let chunk = 256 << 10
        let produced = Produced()
        var router = BLIPRouter()
        router.register(profile: "attachment") { _, _ in
            BLIPResponse(
                properties: ["Content-Type": "application/octet-stream"],
                bodyStream: CountedBody(total: total, chunk: chunk, produced: produced)
            )
        }
        try await withServer(router: router, eventLoopGroup: Self.group) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                let reply = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "attachment"))
                #expect(reply.properties["Content-Type"] == "application/octet-stream")
                var received = 0
                var aheadMost = 0
                var mismatches = 0
                for try await piece in reply.body {
                    let view = piece.readableBytesView
                    let first = UInt8(truncatingIfNeeded: received / chunk)
                    let last = UInt8(truncatingIfNeeded: (received + piece.readableBytes - 1) / chunk)
                    if view.first != first || view.last != last { mismatches += 1 }
                    received += piece.readableBytes
                    aheadMost = max(aheadMost, produced.count.load(ordering: .relaxed) - received)
                }
                #expect(received == total)
                #expect(mismatches == 0)
                // The window grows to 4 MiB at most; a source pulled regardless would run up to 64 MiB ahead.
                #expect(aheadMost <= 8 << 20, "the source ran \(aheadMost) bytes ahead of the reader")
            }
        }
    }
}
