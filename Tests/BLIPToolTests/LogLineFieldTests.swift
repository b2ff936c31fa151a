import BLIPPeerHarness
import Foundation
import NIOCore
import Testing

@testable import BLIPTool

/// The proxy's log lines write their numbers, escapes and times straight into bytes. Each is checked here
/// against what it replaced (`Double.description`, a byte-by-byte escape check, `gmtime_r`) over many
/// seeded random inputs and the edges.
@Suite("blip proxy's log fields, written without formatting APIs")
struct LogLineFieldTests {
    @Test("the eight-bytes-at-a-time escape check agrees with a byte-by-byte one")
    func escapeCheck() {
        var random = SimulationRandom(seed: 0x5EED_0001)
        // Bytes around each boundary the word-wide check tests: controls, quote, backslash, high bytes.
        let interesting: [UInt8] = [
            0x00, 0x01, 0x1F, 0x20, 0x21, 0x22, 0x23, 0x5B, 0x5C, 0x5D, 0x7F, 0x80, 0x9F, 0xA2, 0xDC, 0xFF,
        ]
        for _ in 0..<20_000 {
            let length = random.int(in: 0...40)
            var bytes = (0..<length).map { _ in UInt8(ascii: "a") + UInt8(random.int(in: 0...25)) }
            for _ in 0..<random.int(in: 0...2) where length > 0 {
                bytes[random.int(in: 0...(length - 1))] = interesting[random.int(in: 0...(interesting.count - 1))]
            }
            let expected = bytes.contains { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }
            let found = bytes.withUnsafeBufferPointer { JSONWriter.needsEscaping($0) }
            #expect(found == expected, "\(bytes)")
            if found != expected { return }
        }
    }

    @Test("escaped strings of every length read back through JSONSerialization")
    func escapedStringsReadBack() throws {
        var random = SimulationRandom(seed: 0x5EED_0002)
        let pieces = ["a", "é", "\"", "\\", "\n", "\r", "\t", "\u{01}", "\u{1F}", "~", "\u{7F}", "日本"]
        for _ in 0..<2_000 {
            let text = (0..<random.int(in: 0...30)).map { _ in pieces[random.int(in: 0...(pieces.count - 1))] }.joined()
            var json = JSONWriter()
            json.beginArray()
            json.string(text)
            json.endArray()
            let array = try JSONSerialization.jsonObject(with: Data(json.bytes)) as? [String]
            #expect(array == [text], "\(text.debugDescription)")
            if array != [text] { return }
        }
    }

    @Test("durations in thousandths read as Double's description writes them")
    func thousandths() {
        var random = SimulationRandom(seed: 0x5EED_0003)
        var values = Array(-2_000...200_000)
        values += (0..<20_000).map { _ in random.int(in: 0...999_999_999_999_999) }
        values += [999_999_999_999_999, 1_000_000_000_000_000, -1_000_000_000_000_000, Int.max, Int.min + 1]
        for value in values {
            var bytes: [UInt8] = []
            JSONWriter.appendThousandths(value, to: &bytes)
            let expected = (Double(value) / 1_000).description
            #expect(String(decoding: bytes, as: UTF8.self) == expected, "\(value)")
            if String(decoding: bytes, as: UTF8.self) != expected { return }
        }
    }

    @Test("a duration's microseconds round half away from zero, as the Double arithmetic they replaced")
    func microsecondRounding() {
        var random = SimulationRandom(seed: 0x5EED_0004)
        let nanoseconds: [Int64] =
            [0, 499, 500, 501, 1_499, 1_500, 2_500, -500, -1_500, -499]
            + (0..<20_000).map { _ in Int64(random.int(in: -10_000_000_000...10_000_000_000)) }
        for value in nanoseconds {
            let expected = Int((Double(value) / 1_000).rounded())
            #expect(ProxyLogFormat.microseconds(.nanoseconds(value)) == expected, "\(value) ns")
        }
    }

    @Test("timestamps from the day number match gmtime_r, year 0 to 9999 and past it")
    func timestamps() {
        var random = SimulationRandom(seed: 0x5EED_0005)
        // Year 0 (1 BC) and years past 9999 too: the four-digit slot and the wider year written ahead of it.
        var seconds: [Int] = [
            0, -1, 86_399, 86_400, 951_782_400, 951_868_799, 4_107_456_000, 253_402_300_799, 253_402_300_800,
            -62_167_219_200, -62_135_596_801, 568_971_820_800,
        ]
        seconds += (0..<50_000).map { _ in random.int(in: -62_167_219_200...253_402_300_799) }
        seconds += (0..<1_000).map { _ in random.int(in: 253_402_300_800...568_971_820_800) }
        for second in seconds {
            let micros = random.int(in: 0...999_999)
            let date = Date(timeIntervalSince1970: Double(second) + Double(micros) / 1_000_000)
            var bytes: [UInt8] = []
            ProxyLogFormat.writeTime(date, withDay: true, into: &bytes)
            // What gmtime_r gives for the same instant, formatted the same way.
            let interval = date.timeIntervalSince1970
            var whole = time_t(interval.rounded(.down))
            let fraction = Int(((interval - Double(whole)) * 1_000_000).rounded(.down))
            var parts = tm()
            gmtime_r(&whole, &parts)
            let expected = String(
                format: "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
                Int(parts.tm_year) + 1900,
                Int(parts.tm_mon) + 1,
                Int(parts.tm_mday),
                Int(parts.tm_hour),
                Int(parts.tm_min),
                Int(parts.tm_sec),
                fraction
            )
            #expect(String(decoding: bytes, as: UTF8.self) == expected, "\(second) s")
            if String(decoding: bytes, as: UTF8.self) != expected { return }
        }
    }
}
