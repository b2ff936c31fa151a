import BLIPWire
import NIOCore
import PropertyBased
import Testing

/// A small deterministic generator for choices inside one property-test case.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

struct GeneratedMessage: Sendable, CustomStringConvertible {
    var sizeExponent: Int
    var kind: Int
    var compressed: Bool
    var urgent: Bool
    var seed: UInt64

    var description: String {
        "2^\(self.sizeExponent) \(["random", "text", "zeros"][self.kind])\(self.compressed ? " compressed" : "")"
    }

    func body() -> [UInt8] {
        var rng = SplitMix64(state: self.seed)
        let count = Int.random(in: 0..<(1 << self.sizeExponent), using: &rng)
        switch self.kind {
        case 0: return TestData.random(count, seed: self.seed | 1)
        case 1: return TestData.text(count)
        default: return [UInt8](repeating: 0, count: count)
        }
    }

    func properties(_ index: Int) -> BLIPProperties {
        ["Profile": "roundTrip", "X-Index": "\(index)", "X-Seed": "\(self.seed)", "Content-Type": "application/json"]
    }
}

@Suite("Round trips")
struct RoundTripPropertyTests {
    static let messages = zip(
        Gen.int(in: 0...20),
        Gen.int(in: 0...2),
        Gen.bool,
        Gen.bool,
        Gen.uint64()
    ).map { GeneratedMessage(sizeExponent: $0, kind: $1, compressed: $2, urgent: $3, seed: $4) }

    /// Random messages (bodies from 0 bytes to 1 MiB) are framed with a random budget per frame, their
    /// frames interleaved, and decoded by a fresh decoder: every message comes back exactly, and no frame
    /// exceeds its budget.
    @Test("random messages survive framing, interleaving and decoding in every dialect")
    func roundTrip() async {
        let cases = zip(Gen.int(in: 0...2), Self.messages.array(of: 1...3), Gen.uint64())
        await propertyCheck(count: 45, input: cases) { dialectIndex, messages, splitSeed throws in
            let dialect = BLIPDialect.allCases[dialectIndex]
            var rng = SplitMix64(state: splitSeed)
            let encoder = BLIPFrameEncoder(dialect: dialect)
            var pending: [(header: BLIPFrameHeader, data: BLIPMessageData)] = []
            let bodies = messages.map { $0.body() }
            for (index, message) in messages.enumerated() {
                var data: BLIPMessageData
                var compressed: Bool
                if message.compressed && dialect != .blip3 || Bool.random(using: &rng) {
                    (data, compressed) = try encoder.makeMessageData(
                        properties: message.properties(index),
                        body: ByteBuffer(bytes: bodies[index]),
                        compressed: message.compressed
                    )
                } else {
                    // As a streamed body arrives: the property block, then the body in random pieces.
                    var head = ByteBuffer()
                    try encoder.writeProperties(message.properties(index), into: &head)
                    data = BLIPMessageData(head)
                    var body = ByteBuffer(bytes: bodies[index])
                    while body.readableBytes > 0 {
                        data.append(
                            body.readSlice(length: min(body.readableBytes, Int.random(in: 1...40_000, using: &rng)))!
                        )
                    }
                    compressed = message.compressed && dialect == .blip3
                }
                var flags: BLIPFrameFlags = compressed ? [.compressed] : []
                if message.urgent { flags.insert(.urgent) }
                pending.append((BLIPFrameHeader(messageNumber: UInt64(index + 1), type: .request, flags: flags), data))
            }
            var replay = DirectionReplay(dialect: dialect)
            var frameCount = 0
            while !pending.isEmpty {
                // Round-robin, with some frames tiny and some full size.
                for index in pending.indices.reversed() {
                    let budget = Bool.random(using: &rng) ? 16_384 : Int.random(in: 16...16_384, using: &rng)
                    var output = ByteBuffer()
                    let encoded = try encoder.encodeFrame(
                        pending[index].header,
                        data: &pending[index].data,
                        endOfMessage: true,
                        maximumFrameSize: budget,
                        into: &output
                    )
                    #expect(output.readableBytes <= budget)
                    #expect(encoded.frameLength == output.readableBytes)
                    try replay.receive(output)
                    frameCount += 1
                    if pending[index].data.readableBytes == 0 { pending.remove(at: index) }
                }
            }
            #expect(replay.completed.count == messages.count)
            #expect(replay.pendingCount == 0)
            for message in replay.completed {
                let index = Int(message.number) - 1
                #expect(message.properties == messages[index].properties(index))
                #expect(message.body.readableBytes == bodies[index].count)
                #expect(Array(message.body.readableBytesView) == bodies[index], "\(dialect) \(messages[index])")
                #expect(message.flags.contains(.urgent) == messages[index].urgent)
            }
            _ = frameCount
        }
    }

    @Test(
        "a message split one byte per frame reassembles, properties straddling frames",
        arguments: BLIPDialect.allCases
    )
    func oneBytePerFrame(dialect: BLIPDialect) throws {
        let encoder = BLIPFrameEncoder(dialect: dialect)
        let body = TestData.text(300)
        let trailer = dialect.trailerLength
        let frames = try frameMessage(encoder, flags: .compressed, body: body, frameSize: 2 + 1 + trailer)
        var replay = DirectionReplay(dialect: dialect)
        for frame in frames { try replay.receive(frame) }
        let message = try #require(replay.completed.first)
        #expect(Array(message.body.readableBytesView) == body)
        #expect(message.frameCount == frames.count)
    }
}
