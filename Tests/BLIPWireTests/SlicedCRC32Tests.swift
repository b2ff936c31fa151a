import CBLIPZlib
import Testing

@testable import BLIPWire

/// The short-run CRC must give zlib's value for every length, alignment and running value: a frame it
/// checksums is checked by a peer that uses zlib (go-blip, LiteCore).
@Suite("CRC-32 of short runs")
struct SlicedCRC32Tests {
    private static func zlib(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress else { return crc }
        return UInt32(crc32_z(UInt(crc), base.assumingMemoryBound(to: Bytef.self), bytes.count))
    }

    @Test("equals zlib for every length up to 600 bytes at every offset in a word, chained")
    func equalsZlib() {
        let data = TestData.random(1_024, seed: 0x5EED)
        var running: UInt32 = 0
        var mismatches: [String] = []
        data.withUnsafeBytes { raw in
            for length in 0...600 {
                for offset in 0..<8 {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + length)])
                    let expected = Self.zlib(running, slice)
                    let sliced = SlicedCRC32.update(running, slice)
                    if sliced != expected { mismatches.append("length \(length) offset \(offset)") }
                    running = expected
                }
            }
        }
        #expect(mismatches.isEmpty, "\(mismatches.prefix(5))")
    }

    @Test("the digest's vectors (10.3) and all-ones bytes")
    func vectors() {
        let digits = Array("123456789".utf8)
        #expect(digits.withUnsafeBytes { SlicedCRC32.update(0, $0) } == 0xCBF4_3926)
        #expect([UInt8(0)].withUnsafeBytes { SlicedCRC32.update(0, $0) } == 0xD202_EF8D)
        let ones = [UInt8](repeating: 0xFF, count: 200)
        let expected = ones.withUnsafeBytes { Self.zlib(0x1234_5678, $0) }
        #expect(ones.withUnsafeBytes { SlicedCRC32.update(0x1234_5678, $0) } == expected)
    }

    @Test("a running checksum over pieces of every size equals one over the whole, either side of the threshold")
    func runningChecksumAcrossThreshold() {
        let data = TestData.random(40_000, seed: 7)
        let whole = data.withUnsafeBytes { Self.zlib(0, $0) }
        for piece in [1, 7, 64, 255, 256, 257, 1_000, 4_096] {
            var checksum = BLIPRunningChecksum()
            var start = 0
            while start < data.count {
                let end = min(data.count, start + piece)
                data[start..<end].withUnsafeBytes { checksum.update($0) }
                start = end
            }
            #expect(checksum.value == whole, "pieces of \(piece)")
        }
    }
}
