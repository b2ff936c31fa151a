import BLIPPeerHarness
import BLIPWire
import NIOCore
import Testing

@testable import BLIPEngine

/// A seed or BLIP 2 body gzipped ahead of the engine (``BLIPGzippedBody``, done by a sender before it takes
/// its connection's lock) must put the same bytes on the wire as the engine's own gzip, and count the same.
@Suite("Bodies gzipped ahead of the engine")
struct GzipAheadTests {
    /// Compressible text, data that looks incompressible, and a short body whose gzip is not smaller.
    static let bodies: [(String, ByteBuffer)] = [
        (
            "text",
            ByteBuffer(string: String(repeating: "{\"_id\":\"doc-17\",\"channels\":[\"public\"]} ", count: 3_000))
        ),
        ("random", ByteBuffer(bytes: (0..<70_000).map { UInt8(truncatingIfNeeded: ($0 &* 2_654_435_761) >> 13) })),
        ("short", ByteBuffer(string: "ab")),
    ]

    /// Every frame one engine sends for `message`, concatenated.
    static func wire(_ message: BLIPOutgoingMessage, dialect: BLIPDialect) throws -> (
        ByteBuffer, Int, BLIPFrameEncoder.Statistics
    ) {
        let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
        _ = try engine.enqueue(message)
        var wire = ByteBuffer()
        var frames = 0
        for _ in 0..<1_000 {
            var output = ByteBuffer()
            guard case .frame = try engine.nextFrame(into: &output, now: .now()) else { break }
            wire.writeBuffer(&output)
            frames += 1
        }
        return (wire, frames, engine.encoderStatistics)
    }

    @Test(
        "the frames and the statistics are the engine's own, byte for byte",
        arguments: [BLIPDialect.blip2, .seed],
        [0, 1, 2]
    )
    func sameFrames(dialect: BLIPDialect, bodyIndex: Int) throws {
        let (name, body) = Self.bodies[bodyIndex]
        let inside = try Self.wire(request(body: body, compressed: true), dialect: dialect)
        var ahead = request(body: body, compressed: true)
        let gzipped = try BLIPGzippedBody(
            gzipping: body,
            configuration: BLIPEngineConfiguration(dialect: dialect).encoder
        )
        ahead.body = .buffer(gzipped.wireBody)
        ahead.gzippedAhead = gzipped.outcome
        let outside = try Self.wire(ahead, dialect: dialect)
        #expect(inside.1 > 0 && inside.1 == outside.1, "\(name): \(inside.1) frames against \(outside.1)")
        #expect(inside.0 == outside.0, "\(name): the frames differ")
        var counted = outside.2
        #expect(counted.bodiesGzippedAhead == 1 && inside.2.bodiesGzippedAhead == 0)
        counted.bodiesGzippedAhead = 0
        #expect(inside.2 == counted, "\(name): \(inside.2) against \(counted)")
        // Each case reaches the branch it is there for.
        switch name {
        case "text": #expect(gzipped.outcome.isCompressed && gzipped.wireBody.readableBytes < body.readableBytes / 10)
        default: #expect(!gzipped.outcome.isCompressed && gzipped.outcome.isSkipped && gzipped.wireBody == body)
        }
    }

    @Test("the peer reads a body gzipped ahead back whole", arguments: [BLIPDialect.blip2, .seed])
    func decodesBack(dialect: BLIPDialect) throws {
        let link = BLIPPeerLink(configuration: BLIPEngineConfiguration(dialect: dialect))
        let body = Self.bodies[0].1
        var message = request(body: body, compressed: true)
        let gzipped = try BLIPGzippedBody(
            gzipping: body,
            configuration: BLIPEngineConfiguration(dialect: dialect).encoder
        )
        message.body = .buffer(gzipped.wireBody)
        message.gzippedAhead = gzipped.outcome
        _ = try link.client.enqueue(message)
        let events = try link.exchange()
        var received = ByteBuffer()
        var completed = 0
        for event in events[.server] ?? [] {
            switch event {
            case .messageStarted(var message):
                received.writeBuffer(&message.body)
                if message.isComplete { completed += 1 }
            case .bodyReceived(_, var piece, let isComplete):
                received.writeBuffer(&piece)
                if isComplete { completed += 1 }
            default: break
            }
        }
        #expect(completed == 1 && received == body)
    }
}
