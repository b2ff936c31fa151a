import NIOCore
import Testing

@testable import BLIPWire

/// A small uncompressed message keeps its properties and body until it is framed; its block is encoded
/// straight into the frame then. The frames must be exactly those of data encoded up front.
@Suite("Deferred message data")
struct DeferredMessageDataTests {
    static func properties(_ index: Int) -> BLIPProperties {
        switch index % 4 {
        case 0: [:]
        case 1: ["Profile": "echo"]
        case 2: ["Profile": "rev", "X-Index": "\(index)", "Content-Type": "application/json"]
        default: ["Profile": "changes", "long": String(repeating: "é", count: index % 300)]
        }
    }

    static func body(_ index: Int) -> ByteBuffer {
        let size = (index * 211) % 1100
        return ByteBuffer(bytes: (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 13 &+ index) })
    }

    /// The same message's data, its block written into a buffer at once (the form of a streamed message's).
    static func encodedUpFront(
        _ properties: BLIPProperties,
        _ body: ByteBuffer,
        encoder: BLIPFrameEncoder
    ) throws -> BLIPMessageData {
        var head = ByteBuffer()
        try encoder.writeProperties(properties, into: &head)
        head.writeImmutableBuffer(body)
        return BLIPMessageData(head)
    }

    @Test(
        "deferred data gives the frames of data encoded up front, whole or split, checksums chained",
        arguments: [BLIPDialect.blip3, .blip2, .seed]
    )
    func sameFramesAsEncodedUpFront(dialect: BLIPDialect) throws {
        let deferring = BLIPFrameEncoder(dialect: dialect)
        let upFront = BLIPFrameEncoder(dialect: dialect)
        var deferredCount = 0
        for index in 0..<80 {
            let properties = Self.properties(index)
            let body = Self.body(index)
            var data = try deferring.makeMessageData(properties: properties, body: body, compressed: false).data
            if data.isWholeAndUnencoded { deferredCount += 1 }
            var expectedData = try Self.encodedUpFront(properties, body, encoder: upFront)
            #expect(data.readableBytes == expectedData.readableBytes, "message \(index)")
            // Frames from 96 bytes (nearly every message split) to 4 KiB (none).
            let frameSize = [96, 512, 1024, 4096][index % 4]
            let frames = try deferring.allFrames(of: &data, number: UInt64(index + 1), frameSize: frameSize)
            let expected = try upFront.allFrames(of: &expectedData, number: UInt64(index + 1), frameSize: frameSize)
            #expect(frames == expected, "message \(index), \(body.readableBytes) bytes, frames of \(frameSize)")
            deferring.recycle(&data)
        }
        #expect(deferring.checksumValue == upFront.checksumValue)
        #expect(deferredCount >= 60, "the deferred path ran for \(deferredCount) of 80 messages")
    }

    @Test("only a small, uncompressed body's storage is kept until framing")
    func whatIsDeferred() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        let small = try encoder.makeMessageData(
            properties: ["a": "b"],
            body: ByteBuffer(string: "hi"),
            compressed: false
        )
        #expect(small.data.isWholeAndUnencoded)

        var large = ByteBuffer(repeating: 7, count: BLIPFrameEncoder.deferredBodyStorageLimit * 4)
        let slice = large.readSlice(length: 10)!
        let sliced = try encoder.makeMessageData(properties: ["a": "b"], body: slice, compressed: false)
        #expect(!sliced.data.isWholeAndUnencoded, "a slice of a large buffer is copied, not kept")

        let compressed = try encoder.makeMessageData(properties: [:], body: ByteBuffer(string: "hi"), compressed: true)
        #expect(!compressed.data.isWholeAndUnencoded)
        #expect(compressed.compressed)
    }

    @Test("properties that cannot be sent are refused when the message is made, not when it is framed")
    func refusedWhenMade() {
        for dialect in BLIPDialect.allCases {
            let encoder = BLIPFrameEncoder(dialect: dialect)
            #expect(throws: BLIPWireError.self) {
                try encoder.makeMessageData(properties: ["bad": "nul\0inside"], body: ByteBuffer(), compressed: false)
            }
            let huge = String(repeating: "x", count: BLIPPropertyCodec.defaultMaximumSize)
            #expect(throws: BLIPWireError.self) {
                try encoder.makeMessageData(properties: ["big": huge], body: ByteBuffer(), compressed: false)
            }
        }
    }

    @Test("pieces read from deferred data, and data appended after it, are the encoded stream")
    func piecesAreTheEncoding() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip2)
        let properties: BLIPProperties = ["Profile": "getAttachment", "digest": "sha1-abc"]
        let body = ByteBuffer(string: "attachment bytes")
        var data = try encoder.makeMessageData(properties: properties, body: body, compressed: false).data
        #expect(data.isWholeAndUnencoded)
        var upFront = try Self.encodedUpFront(properties, body, encoder: encoder)
        var expected = upFront.readSlice(upTo: .max)

        #expect(data.peekSlice(upTo: 5) == expected.getSlice(at: expected.readerIndex, length: 5))
        #expect(data.isWholeAndUnencoded, "a peek leaves the data as it was")
        data.append(ByteBuffer(string: " and more"))
        expected.writeString(" and more")
        var read = ByteBuffer()
        while data.readableBytes > 0 {
            var piece = data.readSlice(upTo: 7)
            read.writeBuffer(&piece)
        }
        #expect(read == expected)
    }
}
