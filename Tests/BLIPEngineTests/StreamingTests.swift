import BLIPEngine
import BLIPPeerHarness
import BLIPWire
import NIOCore
import Testing

@Suite("Streaming bodies")
struct StreamingTests {
    /// A 64 MiB body streamed out chunk by chunk while the receiver consumes it: the sender never holds
    /// more than the low watermark plus a chunk, the receiver never more than the window plus a frame
    /// (a 1 GiB body behaves the same; 64 MiB keeps the test quick).
    @Test("a large streamed body never sits in memory on either side", arguments: [BLIPDialect.blip3, .blip2])
    func boundedMemory(dialect: BLIPDialect) throws {
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.consumesRequestBodiesManually = true
        configuration.sendWindow = .fixed(128_000)
        let link = BLIPPeerLink(configuration: configuration)
        let total = 64 << 20
        let chunkSize = 32_768
        let (id, _) = try link.client.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "upload"], body: .streamed)
        )
        var produced = 0
        var received = 0
        var incoming: BLIPIncomingID?
        var maxQueued = 0
        var maxHeld = 0
        var complete = false
        var checksum = BLIPRunningChecksum()
        var expected = BLIPRunningChecksum()
        let chunk = SimulatedBody(kind: .random, length: chunkSize, seed: 3).bytes(0..<chunkSize)
        for _ in 0..<200_000 where !complete {
            while produced < total && link.client.wantsBody(id) {
                let size = min(chunkSize, total - produced)
                let piece = chunk.getSlice(at: 0, length: size)!
                expected.update(piece)
                produced += size
                _ = try link.client.appendBody(id, piece, isComplete: produced == total)
                maxQueued = max(maxQueued, produced - sentBodyEstimate(link))
            }
            try link.write(from: .client, limit: 4)
            for delivery in link.deliver(from: .client) {
                guard case .received(let result) = delivery else { throw BLIPEngineError(.protocolViolation, "failed") }
                switch result.event {
                case .messageStarted(let message)?:
                    incoming = message.id
                    checksum.update(message.body)
                    received += message.body.readableBytes
                case .bodyReceived(_, let body, let isComplete)?:
                    checksum.update(body)
                    received += body.readableBytes
                    complete = isComplete
                default: break
                }
            }
            if let incoming {
                maxHeld = max(maxHeld, link.server.unconsumedBytes(of: incoming))
                _ = link.server.consumed(incoming, bytes: 40_000)  // a slowish consumer
            }
            try link.write(from: .server)
            _ = link.deliver(from: .server)
        }
        #expect(complete && received == total)
        #expect(checksum.value == expected.value)
        #expect(maxHeld <= 128_000 + 16_384, "receiver held \(maxHeld)")
        #expect(maxQueued <= configuration.streamedBodyLowWatermark + chunkSize + 16_384, "sender queued \(maxQueued)")
    }

    /// Bytes of the client's first message already framed (close enough: frame lengths).
    private func sentBodyEstimate(_ link: BLIPPeerLink) -> Int {
        link.sentFrames[.client]!.reduce(0) { $0 + $1.length - 3 }
    }

    @Test("a streamed message sends its properties at once, then waits for body without blocking others")
    func starvedMessageDoesNotBlock() throws {
        let link = BLIPPeerLink()
        let (streamed, _) = try link.client.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "slow"], body: .streamed)
        )
        var events = try link.exchange()
        let head = try #require(events[.server]!.first?.started)
        #expect(head.properties.profile == "slow" && !head.isComplete && head.id.number == 1)
        #expect(link.client.status(of: streamed) == .waitingForBody)
        #expect(!link.client.hasFrameToSend)
        _ = try link.client.enqueue(request("other", body: bytes(10)))
        events = try link.exchange()
        #expect(events[.server]!.compactMap(\.started?.properties.profile) == ["other"])
        #expect(try link.client.appendBody(streamed, bytes(100), isComplete: false))
        events = try link.exchange()
        guard case .bodyReceived(_, let middle, false)? = events[.server]!.first else {
            Issue.record("no body: \(events)")
            return
        }
        #expect(middle.readableBytes == 100)
        _ = try link.client.appendBody(streamed, bytes(5), isComplete: true)
        events = try link.exchange()
        guard case .bodyReceived(_, let tail, true)? = events[.server]!.first else {
            Issue.record("no final body: \(events)")
            return
        }
        #expect(tail.readableBytes == 5)
        #expect(link.client.status(of: streamed) == nil)
    }

    @Test("an empty streamed body completes with a final frame")
    func emptyStreamedBody() throws {
        let link = BLIPPeerLink()
        let (id, _) = try link.client.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "e"], body: .streamed)
        )
        _ = try link.client.appendBody(id, ByteBuffer(), isComplete: true)
        let events = try link.exchange()
        #expect(events[.server]!.first?.started?.isComplete == true)
        #expect(events[.server]!.first?.started?.body.readableBytes == 0)
    }
}
