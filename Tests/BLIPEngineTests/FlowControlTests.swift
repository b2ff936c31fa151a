import BLIPEngine
import BLIPPeerHarness
import BLIPWire
import NIOCore
import Testing

@Suite("Flow control")
struct FlowControlTests {
    static func fixedWindow(_ dialect: BLIPDialect = .blip3) -> BLIPEngineConfiguration {
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.sendWindow = .fixed(128_000)
        return configuration
    }

    /// Runs the link in virtual time until the client's reply arrives; returns the virtual time taken.
    static func transferTime(_ link: BLIPPeerLink, step: TimeAmount = .milliseconds(1)) throws -> TimeAmount {
        let start = link.now
        var done = false
        for _ in 0..<200_000 where !done {
            for side in BLIPPeerLink.Side.allCases { try link.write(from: side) }
            link.advance(by: step)
            for side in BLIPPeerLink.Side.allCases {
                for delivery in link.deliver(from: side) {
                    guard case .received(let result) = delivery else {
                        throw BLIPEngineError(.protocolViolation, "failed")
                    }
                    if side == .server, case .messageStarted(let reply)? = result.event, reply.isComplete {
                        done = true
                    }
                    if side == .client, case .messageStarted(let message)? = result.event, message.isComplete {
                        _ = try link.server.enqueue(
                            BLIPOutgoingMessage(.response(toRequest: message.id.number), properties: [:])
                        )
                    } else if side == .client, case .bodyReceived(let id, _, true)? = result.event, id.isRequest {
                        _ = try link.server.enqueue(
                            BLIPOutgoingMessage(.response(toRequest: id.number), properties: [:])
                        )
                    }
                }
            }
        }
        #expect(done)
        return link.now - start
    }

    @Test(
        "the receiver ACKs at least every 50 000 bytes, counting frame bytes with the CRC, values strictly increasing",
        arguments: [BLIPDialect.blip3, .blip2]
    )
    func ackCadence(dialect: BLIPDialect) throws {
        let client = BLIPConnectionEngine(configuration: Self.fixedWindow(dialect))
        let server = BLIPConnectionEngine(configuration: Self.fixedWindow(dialect))
        let ackDecoder = BLIPFrameDecoder(dialect: dialect)
        _ = try client.enqueue(request(body: bytes(400_000)))
        var received = 0
        var expectedCounts: [UInt64] = []
        var acks: [UInt64] = []
        var sinceLastACK = 0
        var frame = ByteBuffer()
        var ack = ByteBuffer()
        while true {
            frame.clear()
            guard case .frame(let sent) = try client.nextFrame(into: &frame, now: .now()) else { break }
            let wake = try server.receive(frame, now: .now()).wakeWriter
            if sent.header.flags.contains(.moreComing) {
                let bodyLength = sent.length - (try sent.header.encodedLength(in: dialect))
                received += bodyLength
                sinceLastACK += bodyLength
                if sinceLastACK >= 50_000 {
                    expectedCounts.append(UInt64(received))
                    sinceLastACK = 0
                }
            }
            #expect(wake == (sinceLastACK == 0 && sent.header.flags.contains(.moreComing)))
            // The server's writer sends its ACKs at once; they go back to the client.
            ack.clear()
            while case .frame = try server.nextFrame(into: &ack, now: .now()) {
                guard case .ack(let decoded) = try ackDecoder.decode(ack) else { break }
                acks.append(decoded.byteCount)
                _ = try client.receive(ack, now: .now())
                ack.clear()
            }
        }
        #expect(client.outgoingCount == 0, "the whole request was sent")
        #expect(acks.count >= 5)
        #expect(acks == expectedCounts, "an ACK once 50 000 more bytes (CRC included) have arrived")
        #expect(zip(acks, acks.dropFirst()).allSatisfy { $0 < $1 }, "strictly increasing")
    }

    @Test("a sender pauses at 128 000 unacknowledged bytes and resumes on ACK")
    func pauseAndResume() throws {
        let link = BLIPPeerLink(configuration: Self.fixedWindow())
        let (id, _) = try link.client.enqueue(request(body: bytes(1_000_000)))
        link.held = [.server]  // the server's ACKs stay on the wire
        for _ in 0..<50 {
            try link.write(from: .client)
            _ = link.deliver(from: .client)
            try link.write(from: .server)
        }
        let sent = link.sentFrames[.client]!.reduce(0) { $0 + $1.length }
        #expect(link.client.status(of: id) == .waitingForACK)
        #expect(sent >= 128_000 && sent <= 128_000 + 16_384 + 100)
        #expect(link.framesInFlight(from: .server) > 0, "ACKs are waiting on the wire")
        link.held = []
        _ = link.deliver(from: .server)
        #expect(link.client.status(of: id) == .queued)
        try link.exchange()
        #expect(link.client.status(of: id) == nil, "fully sent")
    }

    @Test("ACKs go out ahead of every message frame")
    func acksFirst() throws {
        let link = BLIPPeerLink(configuration: Self.fixedWindow())
        _ = try link.server.enqueue(request("server-bulk", body: bytes(500_000)))
        _ = try link.client.enqueue(request("client-bulk", body: bytes(500_000)))
        // The server receives enough of the client's request for an ACK while it has its own bulk queued.
        try link.write(from: .client, limit: 4)
        let results = link.deliver(from: .client)
        #expect(results.contains { if case .received(let r) = $0 { r.wakeWriter } else { false } })
        let next = try link.write(from: .server, limit: 1)
        #expect(next.first?.header.type == .ackRequest)
    }

    @Test("a lagging consumer holds back ACKs: the receiver's memory stays within the window plus a frame")
    func consumerBackpressure() throws {
        let link = BLIPPeerLink(configuration: Self.fixedWindow())
        _ = try link.client.enqueue(request("download", streamsReply: true))
        var events = try link.exchange()
        let requestNumber = try #require(events[.server]!.first?.started?.id.number)
        _ = try link.server.enqueue(
            BLIPOutgoingMessage(.response(toRequest: requestNumber), properties: [:], body: .buffer(bytes(2_000_000)))
        )
        events = try link.exchange()
        let reply = try #require(events[.client]!.first?.started)
        let held = link.client.unconsumedBytes(of: reply.id)
        #expect(held > 100_000 && held <= 128_000 + 16_384, "stalled at the window: \(held)")
        #expect(!reply.isComplete)
        // Consuming lets ACKs flow, and the rest arrives; every bound holds on the way.
        var complete = false
        // Everything delivered so far: the head's body and the pieces after it.
        var delivered = events[.client]!.reduce(0) { total, event in
            switch event {
            case .messageStarted(let message): total + message.body.readableBytes
            case .bodyReceived(_, let body, _): total + body.readableBytes
            default: total
            }
        }
        for _ in 0..<1000 where !complete {
            _ = link.client.consumed(reply.id, bytes: delivered)
            delivered = 0
            for event in try link.exchange()[.client]! {
                if case .bodyReceived(_, let body, let isComplete) = event {
                    delivered += body.readableBytes
                    complete = complete || isComplete
                }
            }
            #expect(link.client.unconsumedBytes(of: reply.id) <= 128_000 + 16_384)
        }
        #expect(complete)
    }

    @Test("the seed dialect has no ACKs and never pauses")
    func seedHasNoFlowControl() throws {
        let link = BLIPPeerLink(configuration: BLIPEngineConfiguration(dialect: .seed))
        _ = try link.client.enqueue(request(body: bytes(600_000)))
        link.held = [.server]
        try link.exchange()
        #expect(link.sentFrames[.server]!.isEmpty, "no ACK frames")
        #expect(link.client.outgoingCount == 0, "sent whole without waiting")
    }

    /// A 16 MiB message over a link that delays each direction by 25 ms (virtual time, unlimited
    /// bandwidth): the fixed 128 000-byte window allows one window per round trip; the adaptive one grows.
    @Test("the adaptive window carries one message at least 5x faster than the fixed window over a 50 ms round trip")
    func adaptiveWindowOverLongRoundTrip() throws {
        var times: [String: TimeAmount] = [:]
        for (name, window) in [
            ("fixed", BLIPEngineConfiguration.SendWindow.fixed(128_000)),
            ("adaptive", .adaptive(initial: 128_000, maximum: 4 << 20)),
        ] {
            var configuration = BLIPEngineConfiguration()
            configuration.sendWindow = window
            let link = BLIPPeerLink(configuration: configuration)
            link.oneWayDelay = .milliseconds(25)
            _ = try link.client.enqueue(request("sink", body: bytes(16 << 20)))
            times[name] = try Self.transferTime(link)
            if name == "adaptive" {
                #expect(link.client.sendWindowSize == 4 << 20, "grew to the cap")
                #expect(link.client.lastRoundTrip.map { $0 >= .milliseconds(50) } == true)
            }
        }
        let fixed = Double(times["fixed"]!.nanoseconds) / 1e9
        let adaptive = Double(times["adaptive"]!.nanoseconds) / 1e9
        let megabytes = Double(16 << 20) / 1_048_576
        print(
            "16 MiB over a 50 ms round trip (virtual time): fixed window \(fixed) s (\(megabytes / fixed) MiB/s), "
                + "adaptive \(adaptive) s (\(megabytes / adaptive) MiB/s), ratio \(fixed / adaptive)"
        )
        #expect(fixed / adaptive >= 5)
    }

    /// Queueing shows as a longer round trip: the window must give back what it grew, or the bytes it lets
    /// sit in socket buffers delay everything behind them (urgent messages included).
    @Test("the adaptive window grows while the round trip is near its minimum and shrinks when it rises")
    func adaptiveWindowShrinksUnderQueueing() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.sendWindow = .adaptive(initial: 128_000, maximum: 4 << 20)
        let link = BLIPPeerLink(configuration: configuration)
        link.oneWayDelay = .milliseconds(1)
        _ = try link.client.enqueue(request("sink", body: bytes(64 << 20)))
        func run(steps: Int) throws {
            for _ in 0..<steps {
                for side in BLIPPeerLink.Side.allCases { try link.write(from: side) }
                link.advance(by: .microseconds(500))
                for side in BLIPPeerLink.Side.allCases { _ = link.deliver(from: side) }
            }
        }
        try run(steps: 20)
        let grown = link.client.sendWindowSize
        #expect(grown >= 1 << 20, "grew while the round trip stayed at 2 ms")
        link.oneWayDelay = .milliseconds(20)
        try run(steps: 400)
        #expect(link.client.sendWindowSize < 256_000, "shrank to near the initial window, from \(grown)")
        #expect(link.client.outgoingCount == 1, "still sending")
    }
}
