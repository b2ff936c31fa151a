import BLIPPeerHarness
import BLIPWire
import NIOCore
import Testing

@testable import BLIPEngine

@Suite("Numbering and framing")
struct NumberingAndFramingTests {
    @Test("requests are numbered when their first frame leaves, with the reply registered first")
    func lazyNumbering() throws {
        let engine = BLIPConnectionEngine()
        let (big, _) = try engine.enqueue(request(body: bytes(40_000)))
        let (urgent, _) = try engine.enqueue(request(urgent: true))
        #expect(!engine.isAwaitingReply(big) && !engine.isAwaitingReply(urgent))
        var output = ByteBuffer()
        let first = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
        #expect(first.message == big && first.header.messageNumber == 1 && first.isFirstFrame)
        #expect(engine.isAwaitingReply(big), "registered before the frame reaches anyone")
        output.clear()
        let second = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
        #expect(second.message == urgent && second.header.messageNumber == 2)
    }

    @Test("an urgent request queued behind started traffic still starts in number order")
    func urgentKeepsOrder() throws {
        let link = BLIPPeerLink()
        for _ in 0..<3 { _ = try link.client.enqueue(request(body: bytes(60_000))) }
        try link.write(from: .client, limit: 4)
        _ = try link.client.enqueue(request("late"))
        _ = try link.client.enqueue(request("urgent", urgent: true))
        try link.exchange()
        let firstFrames = link.sentFrames[.client]!.filter { $0.isFirstFrame && $0.header.type == .request }
        #expect(firstFrames.map(\.header.messageNumber) == [1, 2, 3, 4, 5])
    }

    @Test("frames use 16 KiB, or 4 KiB for a normal message while an urgent one waits behind it")
    func frameBudgets() throws {
        let engine = BLIPConnectionEngine()
        let (normal, _) = try engine.enqueue(request(body: bytes(100_000)))
        let (other, _) = try engine.enqueue(request(body: bytes(100_000)))
        var output = ByteBuffer()
        var sizes: [(BLIPOutgoingID?, Int)] = []
        for _ in 0..<3 {
            output.clear()
            let frame = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
            sizes.append((frame.message, frame.length))
        }
        #expect(sizes.allSatisfy { $0.1 == 16_384 })
        _ = try engine.enqueue(request("urgent", body: bytes(50_000), urgent: true))
        // The urgent request went right behind the head; the head message now sends a small frame.
        output.clear()
        let small = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
        #expect(small.length == 4096 && (small.message == normal || small.message == other))
        output.clear()
        let urgentFrame = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
        #expect(urgentFrame.header.flags.contains(.urgent) && urgentFrame.length == 16_384)
    }

    @Test("no frame exceeds its budget, compressed or not, in any dialect", arguments: BLIPDialect.allCases)
    func budgetsHold(dialect: BLIPDialect) throws {
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.encoder.skipsIncompressibleData = false
        let link = BLIPPeerLink(configuration: configuration)
        let random = SimulatedBody(kind: .random, length: 300_000, seed: 7)
        _ = try link.client.enqueue(request(body: random.bytes(0..<random.length), compressed: true))
        _ = try link.client.enqueue(request(body: random.bytes(0..<100_000), urgent: true, compressed: true))
        let events = try link.exchange()
        #expect(events[.server]!.count >= 2)
        #expect(link.sentFrames[.client]!.allSatisfy { $0.length <= 16_384 })
    }

    @Test("no-reply requests are never awaited")
    func noReplyNeverAwaited() throws {
        let engine = BLIPConnectionEngine()
        var output = ByteBuffer()
        for _ in 0..<3 {
            _ = try engine.enqueue(request(noReply: true))
            _ = try engine.nextFrame(into: &output, now: .now())
        }
        #expect(engine.awaitingReplyCount == 0, "no-reply requests are never awaited")
    }

    /// The counter is set just below the limit (`@testable`): 2^32 requests are too many to send in a test.
    @Test("numbers above 2^32-1 are never written")
    func numbersExhausted() throws {
        let engine = BLIPConnectionEngine()
        engine.lastRequestNumberSent = BLIPFrameHeader.maximumMessageNumber - 1
        let (last, _) = try engine.enqueue(request("last"))
        let (refused, _) = try engine.enqueue(request("refused"))
        var output = ByteBuffer()
        let frame = try #require(try engine.nextFrame(into: &output, now: .now()).sentFrame)
        #expect(frame.message == last && frame.header.messageNumber == 0xFFFF_FFFF && engine.isAwaitingReply(last))
        output.clear()
        let error = #expect(throws: BLIPEngineError.self) { try engine.nextFrame(into: &output, now: .now()) }
        #expect(error?.code == .invalidMessage)
        #expect(
            error?.wireError == nil,
            "refused by the engine, not by the header encoder: \(String(describing: error))"
        )
        #expect(output.readableBytes == 0, "nothing written")
        #expect(!engine.isAwaitingReply(refused), "the refused request took no number")
        #expect(engine.lastRequestNumberSent == BLIPFrameHeader.maximumMessageNumber)
        #expect(throws: BLIPEngineError.self, "the engine has failed") { try engine.enqueue(request()) }
    }
}
