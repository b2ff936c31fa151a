import BLIPWire
import Benchmark
import CBLIPZlib
import NIOCore

/// Encode + decode of one message per iteration, through a long-lived encoder and decoder pair as on a
/// connection: the steady state, where buffers and zlib streams are reused.
final class CodecRoundTrip {
    let dialect: BLIPDialect
    let compressed: Bool
    let properties: BLIPProperties
    let body: ByteBuffer
    let encoder: BLIPFrameEncoder
    let decoder: BLIPFrameDecoder
    private var data = ByteBuffer()
    private var frame = ByteBuffer()
    private(set) var framesPerMessage = 0

    init(dialect: BLIPDialect, bodySize: Int, compressed: Bool) {
        self.dialect = dialect
        self.compressed = compressed
        self.properties = ["Profile": "echo"]
        self.body = ByteBuffer(bytes: compressed ? BenchmarkData.text(bodySize) : BenchmarkData.pattern(bodySize))
        self.encoder = BLIPFrameEncoder(dialect: dialect)
        self.decoder = BLIPFrameDecoder(dialect: dialect)
        self.data.reserveCapacity(bodySize + 64)
        self.frame.reserveCapacity(16_384)
        self.framesPerMessage = self.run()
    }

    /// One message through both halves; returns the number of frames it took.
    @discardableResult
    func run() -> Int {
        self.data.clear()
        let compressed = try! self.encoder.writeMessageData(
            properties: self.properties,
            body: self.body,
            compressed: self.compressed,
            into: &self.data
        )
        let header = BLIPFrameHeader(messageNumber: 1, type: .request, flags: compressed ? .compressed : [])
        var reader: BLIPMessageReader?
        var bodyBytes = 0
        var frames = 0
        repeat {
            self.frame.clear()
            _ = try! self.encoder.encodeFrame(
                header,
                data: &self.data,
                endOfMessage: true,
                maximumFrameSize: 16_384,
                into: &self.frame
            )
            frames += 1
            guard case .data(let decoded) = try! self.decoder.decode(self.frame) else { fatalError("not data") }
            if reader == nil { reader = self.decoder.makeMessageReader(for: decoded.header) }
            bodyBytes += try! reader!.append(decoded.payload).readableBytes
        } while self.data.readableBytes > 0
        try! reader!.finish()
        precondition(bodyBytes == self.body.readableBytes && reader!.properties == self.properties)
        return frames
    }
}

enum BenchmarkData {
    /// `abcdefghijklmnopqrstuvwxyz0123456789` repeated: the standard 100-byte body of performance.md.
    static func pattern(_ count: Int) -> [UInt8] {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        return (0..<count).map { alphabet[$0 % alphabet.count] }
    }

    /// JSON lines as in performance.md's text workload.
    static func text(_ count: Int) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = 0
        while bytes.count < count {
            let active = index % 3 != 0
            let line =
                "{\"_id\":\"doc-\(index)\",\"type\":\"user\",\"name\":\"User \(index)\",\"email\":\"user\(index)@example.com\","
                + "\"active\":\(active),\"score\":\((index * 7919) % 100_000),\"tags\":[\"alpha\",\"beta\",\"gamma\"]}\n"
            bytes.append(contentsOf: line.utf8)
            index += 1
        }
        return Array(bytes.prefix(count))
    }

    /// xorshift64* bytes, incompressible.
    static func random(_ count: Int) -> [UInt8] {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        var bytes: [UInt8] = []
        while bytes.count < count {
            state ^= state >> 12
            state ^= state << 25
            state ^= state >> 27
            let value = state &* 2_685_821_657_736_338_717
            withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
        }
        return Array(bytes.prefix(count))
    }
}

func wireBenchmarks() {
    for dialect in BLIPDialect.allCases {
        for (sizeName, size) in [("100B", 100), ("16KiB", 16_384)] {
            for compressed in [false, true] {
                // No spaces: the benchmark plugin looks thresholds up by the raw name.
                let name = "codec-\(dialect)-\(sizeName)\(compressed ? "-compressed" : "")"
                Benchmark(name) { benchmark in
                    let roundTrip = CodecRoundTrip(dialect: dialect, bodySize: size, compressed: compressed)
                    benchmark.startMeasurement()
                    for _ in benchmark.scaledIterations {
                        blackHole(roundTrip.run())
                    }
                    benchmark.stopMeasurement()
                }
            }
        }
    }

    // What the per-frame "is it worth compressing?" decision costs, next to what it saves.
    let random = BenchmarkData.random(16_384)
    let text = BenchmarkData.text(16_384)
    Benchmark("compressibility-estimate-16KiB") { benchmark in
        for _ in benchmark.scaledIterations {
            random.withUnsafeBytes { blackHole(BLIPCompressibility.isWorthCompressing($0)) }
        }
    }
    for (name, bytes) in [("random", random), ("text", text)] {
        Benchmark("deflate-16KiB-\(name)-frame") { benchmark in
            var configuration = BLIPFrameEncoder.Configuration(dialect: .blip3)
            configuration.skipsIncompressibleData = false
            let encoder = BLIPFrameEncoder(dialect: .blip3, configuration: configuration)
            let source = ByteBuffer(bytes: bytes)
            var frame = ByteBuffer()
            frame.reserveCapacity(16_384)
            func encodeOne() -> BLIPEncodedFrame {
                var data = source
                frame.clear()
                return try! encoder.encodeFrame(
                    BLIPFrameHeader(messageNumber: 1, type: .request, flags: .compressed),
                    data: &data,
                    endOfMessage: true,
                    maximumFrameSize: 16_384,
                    into: &frame
                )
            }
            _ = encodeOne()  // creates the deflater: measure the steady state only
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                blackHole(encodeOne())
            }
        }
    }

    // Baselines in the same run, so that the figures above can be read as ratios: copying a message's
    // bytes twice (what any framing must at least do), and zlib alone deflating the same 16 KiB.
    for (sizeName, size) in [("100B", 100), ("16KiB", 16_384)] {
        Benchmark("baseline-copy-\(sizeName)") { benchmark in
            let body = ByteBuffer(bytes: BenchmarkData.pattern(size))
            var frame = ByteBuffer()
            var copy = ByteBuffer()
            frame.reserveCapacity(size + 64)
            copy.reserveCapacity(size + 64)
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                frame.clear()
                copy.clear()
                frame.writeImmutableBuffer(body)
                copy.writeImmutableBuffer(frame)
                blackHole(copy.readableBytes)
            }
        }
    }
    Benchmark("baseline-zlib-deflate-16KiB-text") { benchmark in
        let stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        precondition(CBLIPZlib_deflateInit2(stream, 6, -15, 9) == Z_OK)
        var input = text
        var output = [UInt8](repeating: 0, count: 32_768)
        benchmark.startMeasurement()
        for _ in benchmark.scaledIterations {
            input.withUnsafeMutableBufferPointer { inBuffer in
                output.withUnsafeMutableBufferPointer { outBuffer in
                    stream.pointee.next_in = inBuffer.baseAddress
                    stream.pointee.avail_in = uInt(inBuffer.count)
                    stream.pointee.next_out = outBuffer.baseAddress
                    stream.pointee.avail_out = uInt(outBuffer.count)
                    blackHole(deflate(stream, Z_SYNC_FLUSH))
                }
            }
        }
        benchmark.stopMeasurement()
        deflateEnd(stream)
        stream.deallocate()
    }
}
