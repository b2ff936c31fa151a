import BLIPWire
import CBLIPZlib
import Foundation
import NIOCore
import Testing

/// Deterministic test data: xorshift64* bytes (incompressible) and JSON lines (compressible), the
/// generators of the standard benchmark workloads.
enum TestData {
    static func random(_ count: Int, seed: UInt64 = 0x9E37_79B9_7F4A_7C15) -> [UInt8] {
        var state = seed
        var bytes: [UInt8] = []
        bytes.reserveCapacity(count + 8)
        while bytes.count < count {
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            let value = state &* 2_685_821_657_736_338_717
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        return Array(bytes.prefix(count))
    }

    static func text(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = 0
        while bytes.count < count {
            let line =
                "{\"_id\":\"doc-\(String(format: "%08d", index))\",\"type\":\"user\",\"name\":\"User \(index)\","
                + "\"email\":\"user\(index)@example.com\",\"active\":\(index % 3 != 0),"
                + "\"score\":\((index * 7919) % 100_000),\"tags\":[\"alpha\",\"beta\",\"gamma\"]}\n"
            bytes.append(contentsOf: line.utf8)
            index += 1
        }
        return Array(bytes.prefix(count))
    }
}

/// A raw inflater made with nothing but zlib, to check our output independently of our decoder.
final class PlainZlibInflater {
    private var stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)

    init() {
        self.stream.initialize(to: z_stream())
        precondition(CBLIPZlib_inflateInit2(self.stream, -15) == Z_OK)
    }

    deinit {
        inflateEnd(self.stream)
        self.stream.deallocate()
    }

    /// Inflates `input` followed by `00 00 FF FF` and returns everything that comes out.
    func inflate(_ input: [UInt8]) -> [UInt8]? {
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        var data = input + [0x00, 0x00, 0xFF, 0xFF]
        return data.withUnsafeMutableBufferPointer { inBuffer -> [UInt8]? in
            self.stream.pointee.next_in = inBuffer.baseAddress
            self.stream.pointee.avail_in = uInt(inBuffer.count)
            repeat {
                let status = chunk.withUnsafeMutableBufferPointer { outBuffer -> Int32 in
                    self.stream.pointee.next_out = outBuffer.baseAddress
                    self.stream.pointee.avail_out = uInt(outBuffer.count)
                    return CBLIPZlib.inflate(self.stream, Z_SYNC_FLUSH)
                }
                guard status == Z_OK || status == Z_BUF_ERROR else { return nil }
                output += chunk.prefix(chunk.count - Int(self.stream.pointee.avail_out))
            } while self.stream.pointee.avail_out == 0
            return output
        }
    }
}

func zlibCRC(_ bytes: [UInt8], continuing previous: UInt32 = 0) -> UInt32 {
    bytes.withUnsafeBufferPointer { UInt32(crc32(uLong(previous), $0.baseAddress, uInt($0.count))) }
}

/// Frames a whole message with `encoder`, returning the frames.
func frameMessage(
    _ encoder: BLIPFrameEncoder,
    number: UInt64 = 1,
    type: BLIPMessageType = .request,
    flags: BLIPFrameFlags = [],
    properties: BLIPProperties = ["Profile": "test"],
    body: [UInt8],
    frameSize: Int = 16_384
) throws -> [ByteBuffer] {
    var data = ByteBuffer()
    let compressed = try encoder.writeMessageData(
        properties: properties,
        body: ByteBuffer(bytes: body),
        compressed: flags.contains(.compressed),
        into: &data
    )
    var header = BLIPFrameHeader(messageNumber: number, type: type, flags: flags)
    if !compressed { header.flags.remove(.compressed) }
    var frames: [ByteBuffer] = []
    repeat {
        var output = ByteBuffer()
        _ = try encoder.encodeFrame(header, data: &data, endOfMessage: true, maximumFrameSize: frameSize, into: &output)
        #expect(output.readableBytes <= frameSize)
        frames.append(output)
    } while data.readableBytes > 0
    return frames
}

@Suite("Compression and checksums")
struct CompressionTests {
    @Test("CRC-32 sanity values (digest 10.3)")
    func crcValues() {
        #expect(BLIPRunningChecksum.checksum(of: Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(BLIPRunningChecksum.checksum(of: [0]) == 0xD202_EF8D)
    }

    @Test("our compressed BLIP 3 frames inflate with a plain zlib raw inflater, and their CRCs are zlib's")
    func plainZlibDecodesOurOutput() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        let inflater = PlainZlibInflater()
        var runningCRC: UInt32 = 0
        var compressedFrames = 0
        for (number, body) in [TestData.text(300_000), TestData.text(1000), Array("[[2,\"doc2\"]]".utf8)].enumerated() {
            var expectedData = ByteBuffer()
            _ = try BLIPFrameEncoder(dialect: .blip3)
                .writeMessageData(
                    properties: ["Profile": "test"],
                    body: ByteBuffer(bytes: body),
                    compressed: false,
                    into: &expectedData
                )
            var inflatedData: [UInt8] = []
            for frame in try frameMessage(encoder, number: UInt64(number + 1), flags: .compressed, body: body) {
                let bytes = Array(frame.readableBytesView)
                #expect(bytes[1] & 0x08 != 0, "compressed flag set")
                let body = Array(bytes[2..<(bytes.count - 4)])
                let inflated = try #require(inflater.inflate(body), "zlib inflates frame")
                runningCRC = zlibCRC(inflated, continuing: runningCRC)
                #expect(
                    UInt32(bytes[bytes.count - 4]) << 24 | UInt32(bytes[bytes.count - 3]) << 16
                        | UInt32(bytes[bytes.count - 2]) << 8 | UInt32(bytes[bytes.count - 1]) == runningCRC
                )
                inflatedData += inflated
                compressedFrames += 1
            }
            #expect(inflatedData == Array(expectedData.readableBytesView))
        }
        #expect(encoder.statistics.framesCompressed == compressedFrames)
        // A compressed frame carries far more than 16 KiB of text (it is filled until a third of it is
        // used, about 68 KiB of JSON): 300 KB go in 5 frames instead of 19, each small message in one.
        #expect(compressedFrames <= 7)
    }

    @Test("the speed-tuned level 6 sends fewer bytes for JSON documents than zlib's own, and inflates the same")
    func tunedDeflate() throws {
        let body = TestData.text(2 << 20)
        var sizes: [Bool: Int] = [:]
        for tuned in [false, true] {
            var configuration = BLIPFrameEncoder.Configuration(dialect: .blip3)
            configuration.tunesDeflateForSpeed = tuned
            let encoder = BLIPFrameEncoder(dialect: .blip3, configuration: configuration)
            var replay = DirectionReplay(dialect: .blip3)
            for frame in try frameMessage(encoder, flags: .compressed, body: body, frameSize: 16_384) {
                try replay.receive(frame)
            }
            #expect(replay.completed.first.map { Array($0.body.readableBytesView) } == body)
            sizes[tuned] = encoder.statistics.bytesAfterCompression
        }
        #expect(sizes[true]! < sizes[false]!, "\(sizes)")
    }

    @Test("a frame is never larger than its budget, even for incompressible data", arguments: [4096, 16_384, 600])
    func budgetHolds(frameSize: Int) throws {
        var configuration = BLIPFrameEncoder.Configuration(dialect: .blip3)
        configuration.skipsIncompressibleData = false
        let encoder = BLIPFrameEncoder(dialect: .blip3, configuration: configuration)
        var replay = DirectionReplay(dialect: .blip3)
        for (number, body) in [TestData.random(100_000), TestData.text(100_000), []].enumerated() {
            for frame in try frameMessage(
                encoder,
                number: UInt64(number + 1),
                flags: .compressed,
                body: body,
                frameSize: frameSize
            ) {
                #expect(frame.readableBytes <= frameSize)
                try replay.receive(frame)
            }
        }
        #expect(replay.completed.map { $0.body.readableBytes } == [100_000, 100_000, 0])
        let first = try #require(replay.completed.first)
        #expect(Array(first.body.readableBytesView) == TestData.random(100_000))
    }

    @Test("incompressible data is sent raw, and the deflate stream stays in step for what follows")
    func skipsIncompressible() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        var replay = DirectionReplay(dialect: .blip3)
        let random = try frameMessage(encoder, number: 1, flags: .compressed, body: TestData.random(50_000))
        #expect(random.allSatisfy { $0.getInteger(at: 1, as: UInt8.self)! & 0x08 == 0 }, "sent uncompressed")
        #expect(encoder.statistics.compressionSkipped == random.count)
        let text = try frameMessage(encoder, number: 2, flags: .compressed, body: TestData.text(50_000))
        #expect(text.allSatisfy { $0.getInteger(at: 1, as: UInt8.self)! & 0x08 != 0 }, "text is compressed")
        for frame in random + text { try replay.receive(frame) }
        #expect(replay.completed.count == 2)
        #expect(encoder.statistics.bytesAfterCompression * 3 < encoder.statistics.bytesBeforeCompression)
    }

    @Test("the entropy estimate separates random bytes from text and base64")
    func entropyEstimate() {
        let random = TestData.random(16_384)
        let text = TestData.text(16_384)
        let base64 = Array(random.map { UInt8(ascii: "A") + $0 % 26 }.prefix(16_384))
        random.withUnsafeBytes { #expect(BLIPCompressibility.estimatedEntropy(of: $0) > 7.5) }
        text.withUnsafeBytes { #expect(BLIPCompressibility.estimatedEntropy(of: $0) < 5.5) }
        base64.withUnsafeBytes { #expect(!BLIPCompressibility.estimatedEntropy(of: $0).isNaN) }
        random.withUnsafeBytes { #expect(!BLIPCompressibility.isWorthCompressing($0)) }
        text.withUnsafeBytes { #expect(BLIPCompressibility.isWorthCompressing($0)) }
        base64.withUnsafeBytes { #expect(BLIPCompressibility.isWorthCompressing($0)) }
    }

    @Test("level 0 never sends the compressed flag", arguments: BLIPDialect.allCases)
    func levelZero(dialect: BLIPDialect) throws {
        var configuration = BLIPFrameEncoder.Configuration(dialect: dialect)
        configuration.compressionLevel = 0
        let encoder = BLIPFrameEncoder(dialect: dialect, configuration: configuration)
        let frames = try frameMessage(encoder, flags: .compressed, body: TestData.text(40_000))
        var replay = DirectionReplay(dialect: dialect)
        for frame in frames {
            try replay.receive(frame)
            guard case .data(let data) = replay.frames.last else { continue }
            #expect(!data.header.flags.contains(.compressed))
        }
        #expect(replay.completed.first?.body.readableBytes == 40_000)
    }

    @Test("no compressed frame with an empty body is ever emitted (trap 10)")
    func noEmptyCompressedFrames() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        var data = ByteBuffer()
        var output = ByteBuffer()
        let encoded = try encoder.encodeFrame(
            BLIPFrameHeader(messageNumber: 1, type: .request, flags: .compressed),
            data: &data,
            endOfMessage: true,
            maximumFrameSize: 16_384,
            into: &output
        )
        #expect(!encoded.header.flags.contains(.compressed))
        #expect(output.hexString == "01 00 00 00 00 00")
    }

    @Test("a frame inflating past the limit is refused (decompression bomb)")
    func inflateBomb() throws {
        var configuration = BLIPFrameEncoder.Configuration(dialect: .blip3)
        configuration.maximumDataPerCompressedFrame = 8 << 20
        let encoder = BLIPFrameEncoder(dialect: .blip3, configuration: configuration)
        let frames = try frameMessage(encoder, flags: .compressed, body: [UInt8](repeating: 0, count: 4 << 20))
        #expect(frames.count <= 2, "4 MiB of zeros fit one or two 16 KiB frames")
        let first = try #require(frames.first)
        #expect(first.readableBytes <= 16_384)
        var limited = BLIPFrameDecoder.Configuration()
        limited.maximumInflatedFrameSize = 1 << 20
        var replay = DirectionReplay(dialect: .blip3, configuration: limited)
        let error = #expect(throws: BLIPWireError.self) { try replay.receive(first) }
        #expect(error?.code == .inflatedTooLarge(limit: 1 << 20))
        // The default limit accepts it.
        var accepting = DirectionReplay(dialect: .blip3)
        for frame in frames { try accepting.receive(frame) }
        #expect(accepting.completed.first?.body.readableBytes == 4 << 20)
    }

    @Test("ACK frames neither carry nor advance the running CRC")
    func acksSkipChecksum() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        let first = try frameMessage(encoder, number: 1, body: Array("abc".utf8))
        var ack = ByteBuffer()
        try encoder.encodeACK(.ackResponse, messageNumber: 9, byteCount: 50_000, into: &ack)
        #expect(ack.hexString == "09 35 D0 86 03")
        let second = try frameMessage(encoder, number: 2, body: Array("def".utf8))
        var replay = DirectionReplay(dialect: .blip3)
        for frame in first + [ack] + second { try replay.receive(frame) }
        let dataFrames = replay.frames.compactMap { frame -> BLIPDataFrame? in
            if case .data(let data) = frame { return data }
            return nil
        }
        try #require(dataFrames.count == 2)
        let data1 = Array(dataFrames[0].payload.readableBytesView)
        let data2 = Array(dataFrames[1].payload.readableBytesView)
        #expect(dataFrames[1].checksum == zlibCRC(data1 + data2))
    }

    @Test("seed and BLIP 2 bodies: zlib-wrapped bodies are accepted like gzip", arguments: [BLIPDialect.seed, .blip2])
    func zlibWrappedBody(dialect: BLIPDialect) throws {
        // zlib wrapper (78 9C ...) of "hello hello hello", as GTM's inflater would also accept.
        let zlibBody: [UInt8] = [
            0x78, 0x9C, 0xCB, 0x48, 0xCD, 0xC9, 0xC9, 0x57, 0xC8, 0x40, 0x90, 0x00, 0x3A, 0x2E, 0x06, 0x7D,
        ]
        var frame = ByteBuffer(hex: dialect == .seed ? "01 04 00" : "01 08 00")
        frame.writeBytes(zlibBody)
        var replay = DirectionReplay(dialect: dialect)
        try replay.receive(frame)
        let message = try #require(replay.completed.first)
        #expect(String(buffer: message.body) == "hello hello hello")
    }

    @Test(
        "seed and BLIP 2 bodies: corrupt, truncated and oversized gzip are refused",
        arguments: [BLIPDialect.seed, .blip2]
    )
    func badGzipBodies(dialect: BLIPDialect) throws {
        let encoder = BLIPFrameEncoder(dialect: dialect)
        let frames = try frameMessage(encoder, flags: .compressed, body: TestData.text(100_000), frameSize: 2048)
        try #require(frames.count > 3)

        var truncated = DirectionReplay(dialect: dialect)
        var lastFrame = frames[frames.count - 1]
        lastFrame.moveWriterIndex(to: lastFrame.writerIndex - 10)
        for frame in frames.dropLast() { try truncated.receive(frame) }
        #expect(throws: BLIPWireError.self) { try truncated.receive(lastFrame) }

        var corrupt = DirectionReplay(dialect: dialect)
        var damaged = frames[1]
        damaged.setInteger(damaged.getInteger(at: 100, as: UInt8.self)! ^ 0xFF, at: 100)
        try corrupt.receive(frames[0])
        let error = #expect(throws: BLIPWireError.self) {
            for frame in [damaged] + frames.dropFirst(2) { try corrupt.receive(frame) }
        }
        #expect(error?.code.caseName == "invalidGzipBody")

        let decoder = BLIPFrameDecoder(dialect: dialect)
        guard case .data(let first) = try decoder.decode(frames[0]) else { throw BLIPWireError(.truncatedVarint) }
        var reader = decoder.makeMessageReader(for: first.header, maximumBodySize: 50_000)
        let bomb = #expect(throws: BLIPWireError.self) {
            _ = try reader.append(first.payload)
            for frame in frames.dropFirst() {
                guard case .data(let data) = try decoder.decode(frame) else { continue }
                _ = try reader.append(data.payload)
            }
        }
        #expect(bomb?.code == .bodyTooLarge(limit: 50_000))
    }

    @Test("gzip that does not shrink the body is not used", arguments: [BLIPDialect.seed, .blip2])
    func gzipNotSmaller(dialect: BLIPDialect) throws {
        let encoder = BLIPFrameEncoder(dialect: dialect)
        var data = ByteBuffer()
        let compressed = try encoder.writeMessageData(
            properties: [:],
            body: ByteBuffer(string: "tiny"),
            compressed: true,
            into: &data
        )
        #expect(!compressed)
        #expect(data.hexString == "00 74 69 6E 79")
        #expect(encoder.statistics.compressionSkipped == 1)
    }
}
