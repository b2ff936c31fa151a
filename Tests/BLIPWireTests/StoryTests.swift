import BLIPWire
import NIOCore
import Testing

struct Story: Sendable, CustomTestStringConvertible {
    struct Frame: Sendable {
        var hex: String
        var number: UInt64?
        var flags: [String]?
        var checksum: UInt32?
    }

    struct Message: Sendable {
        var number: UInt64
        var type: String
        var flags: [String]
        var properties: [[String]]
        var bodyText: String?
        var bodyLength: Int?
        var bodySHA256: String?
    }

    var name: String
    var dialect: BLIPDialect
    var frames: [Frame]
    var messages: [Message]
    var errorAtFrame: Int?
    var errorReason: String?
    var byteExactEncoder: Bool
    var testDescription: String { "\(self.name) (\(self.dialect))" }

    static let all: [Story] = {
        let json = try! Fixtures.json("stories/stories.json")
        return (json["stories"] as! [[String: Any]]).map { item in
            let error = item["error"] as? [String: Any]
            return Story(
                name: item["name"] as! String,
                dialect: BLIPDialect(rawValue: item["dialect"] as! String)!,
                frames: (item["frames"] as! [[String: Any]]).map {
                    Frame(
                        hex: $0["hex"] as! String,
                        number: ($0["number"] as? Int).map(UInt64.init),
                        flags: $0["flags"] as? [String],
                        checksum: ($0["checksum"] as? String).map { UInt32($0, radix: 16)! }
                    )
                },
                messages: (item["messages"] as! [[String: Any]]).map {
                    Message(
                        number: UInt64($0["number"] as! Int),
                        type: $0["type"] as! String,
                        flags: $0["flags"] as! [String],
                        properties: propertyPairs($0["properties"])!,
                        bodyText: $0["bodyText"] as? String,
                        bodyLength: $0["bodyLength"] as? Int,
                        bodySHA256: $0["bodySHA256"] as? String
                    )
                },
                errorAtFrame: error?["atFrame"] as? Int,
                errorReason: error?["reason"] as? String,
                byteExactEncoder: (item["encoder"] as? [String: Any])?["byteExact"] as? Bool ?? false
            )
        }
    }()
}

/// Multi-frame sessions of one direction, where the deflate context, the running CRC and message
/// assembly carry from frame to frame.
@Suite("Stories")
struct StoryTests {
    @Test("each story decodes frame by frame", arguments: Story.all)
    func replay(_ story: Story) throws {
        var replay = DirectionReplay(dialect: story.dialect)
        for (index, frame) in story.frames.enumerated() {
            if index == story.errorAtFrame {
                let error = #expect(throws: BLIPWireError.self) { try replay.receive(ByteBuffer(hex: frame.hex)) }
                #expect(error?.code.caseName == story.errorReason)
                break
            }
            try replay.receive(ByteBuffer(hex: frame.hex))
            if case .data(let data) = replay.frames.last {
                if let number = frame.number { #expect(data.header.messageNumber == number) }
                if let flags = frame.flags { #expect(data.header.flags == BLIPFrameFlags(names: flags)) }
                #expect(data.checksum == frame.checksum)
            }
        }
        #expect(replay.completed.count == story.messages.count)
        for (message, expected) in zip(replay.completed, story.messages) {
            #expect(message.number == expected.number)
            #expect(message.type == BLIPMessageType(name: expected.type))
            #expect(message.flags == BLIPFrameFlags(names: expected.flags))
            #expect(pairs(message.properties) == expected.properties)
            if let text = expected.bodyText { #expect(String(buffer: message.body) == text) }
            if let length = expected.bodyLength { #expect(message.body.readableBytes == length) }
            if let digest = expected.bodySHA256 { #expect(message.body.sha256Hex == digest) }
        }
    }

    /// zlib at LiteCore's settings (level 6, memLevel 9) produces exactly the digest's bytes, including the
    /// 16-byte third frame that only the shared deflate window makes possible.
    @Test("our encoder reproduces the shared-context sequence of digest 10.4 byte for byte")
    func encodeSharedContext() throws {
        let story = try #require(Story.all.first { $0.byteExactEncoder })
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        for (frame, message) in zip(story.frames, story.messages) {
            var data = ByteBuffer()
            let compressed = try encoder.writeMessageData(
                properties: BLIPProperties(message.properties.map { ($0[0], $0[1]) }),
                body: ByteBuffer(string: message.bodyText!),
                compressed: message.flags.contains("compressed"),
                into: &data
            )
            var flags: BLIPFrameFlags = []
            if compressed { flags.insert(.compressed) }
            var output = ByteBuffer()
            _ = try encoder.encodeFrame(
                BLIPFrameHeader(messageNumber: message.number, type: .request, flags: flags),
                data: &data,
                endOfMessage: true,
                maximumFrameSize: 16_384,
                into: &output
            )
            #expect(output.hexString == frame.hex)
        }
        #expect(encoder.statistics.framesCompressed == 2)
    }
}
