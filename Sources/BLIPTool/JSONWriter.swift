/// Compact JSON written straight into bytes, keys in the order written. `blip proxy --json` writes a line
/// per message: JSONSerialization (which sorts keys with locale-aware comparisons on Linux) cost it more
/// than the relay and the decoding together, and a tree of values built first and then written cost it
/// half its time.
struct JSONWriter {
    private(set) var bytes: [UInt8] = []
    /// Whether the next key or value needs a comma before it.
    private var afterValue = false

    init(capacity: Int = 512) {
        self.bytes.reserveCapacity(capacity)
    }

    /// A writer that appends to `bytes` (a line buffer, say).
    init(appendingTo bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func beginObject() {
        self.separate()
        self.bytes.append(UInt8(ascii: "{"))
        self.afterValue = false
    }

    mutating func endObject() {
        self.bytes.append(UInt8(ascii: "}"))
        self.afterValue = true
    }

    mutating func beginArray() {
        self.separate()
        self.bytes.append(UInt8(ascii: "["))
        self.afterValue = false
    }

    mutating func endArray() {
        self.bytes.append(UInt8(ascii: "]"))
        self.afterValue = true
    }

    /// An object's key (ours: plain ASCII, nothing to escape); its value follows.
    mutating func key(_ key: StaticString) {
        let comma = self.afterValue
        let length = key.utf8CodeUnitCount
        Self.write(atMost: length + 4, to: &self.bytes) { out in
            var index = 0
            if comma { Self.put(UInt8(ascii: ","), at: &index, in: out) }
            Self.put(UInt8(ascii: "\""), at: &index, in: out)
            key.withUTF8Buffer { utf8 in
                if let base = utf8.baseAddress { (out + index).initialize(from: base, count: length) }
            }
            index += length
            Self.put(UInt8(ascii: "\""), at: &index, in: out)
            Self.put(UInt8(ascii: ":"), at: &index, in: out)
            return index
        }
        self.afterValue = false
    }

    mutating func string(_ value: String) {
        self.separate()
        var value = value
        value.withUTF8 { Self.writeEscaped($0, to: &self.bytes) }
        self.afterValue = true
    }

    mutating func string(_ key: StaticString, _ value: String) {
        self.key(key)
        self.string(value)
    }

    /// A string whose bytes `body` appends and which need no escaping (digits, hex, a timestamp).
    mutating func plainString(_ body: (inout [UInt8]) -> Void) {
        self.separate()
        self.bytes.append(UInt8(ascii: "\""))
        body(&self.bytes)
        self.bytes.append(UInt8(ascii: "\""))
        self.afterValue = true
    }

    mutating func int(_ value: Int) {
        self.separate()
        Self.appendDecimal(value, to: &self.bytes)
        self.afterValue = true
    }

    mutating func int(_ key: StaticString, _ value: Int) {
        self.key(key)
        self.int(value)
    }

    /// Message numbers and byte counts: UInt64 on the wire, and any of them may come.
    mutating func int(_ value: UInt64) {
        self.separate()
        Self.appendDecimal(value, to: &self.bytes)
        self.afterValue = true
    }

    mutating func int(_ key: StaticString, _ value: UInt64) {
        self.key(key)
        self.int(value)
    }

    mutating func double(_ value: Double) {
        self.separate()
        self.bytes.append(contentsOf: (value.isFinite ? value.description : "null").utf8)
        self.afterValue = true
    }

    /// `thousandths / 1000` as a JSON number (a log line's duration in milliseconds).
    mutating func thousandths(_ thousandths: Int) {
        self.separate()
        Self.appendThousandths(thousandths, to: &self.bytes)
        self.afterValue = true
    }

    mutating func null() {
        self.separate()
        self.bytes.append(contentsOf: "null".utf8)
        self.afterValue = true
    }

    mutating func stringArray(_ values: [String]) {
        self.beginArray()
        for value in values { self.string(value) }
        self.endArray()
    }

    private mutating func separate() {
        if self.afterValue { self.bytes.append(UInt8(ascii: ",")) }
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends what `body` writes through a pointer, at most `count` bytes, returning how many it wrote: one
    /// capacity check per run of bytes. Appending byte by byte (a uniqueness and a capacity check each, or a
    /// call to copy a few bytes) cost more than the rest of a log line.
    @inline(__always)
    static func write(
        atMost count: Int,
        to bytes: inout [UInt8],
        _ body: (UnsafeMutablePointer<UInt8>) -> Int
    ) {
        guard count > 0 else { return }  // no storage to point at
        bytes.append(addingCapacity: count) { span in
            span.withUnsafeMutableBufferPointer { buffer, initialized in
                initialized += body(buffer.baseAddress! + initialized)
            }
        }
    }

    @inline(__always)
    static func put(_ byte: UInt8, at index: inout Int, in out: UnsafeMutablePointer<UInt8>) {
        (out + index).initialize(to: byte)
        index += 1
    }

    /// The last `count` decimal digits of `value` (not negative), with leading zeros.
    @inline(__always)
    static func putDigits(_ value: Int, count: Int, at index: inout Int, in out: UnsafeMutablePointer<UInt8>) {
        var rest = value
        for offset in stride(from: count - 1, through: 0, by: -1) {
            (out + index + offset).initialize(to: UInt8(ascii: "0") + UInt8(rest % 10))
            rest /= 10
        }
        index += count
    }

    /// Quotes around the UTF-8 bytes as they are; quotes, backslashes and control characters escaped.
    private static func writeEscaped(_ text: UnsafeBufferPointer<UInt8>, to bytes: inout [UInt8]) {
        guard Self.needsEscaping(text) else {
            Self.write(atMost: text.count + 2, to: &bytes) { out in
                var index = 0
                Self.put(UInt8(ascii: "\""), at: &index, in: out)
                if let base = text.baseAddress { (out + 1).initialize(from: base, count: text.count) }
                index += text.count
                Self.put(UInt8(ascii: "\""), at: &index, in: out)
                return index
            }
            return
        }
        // Each byte takes at most six (`\u00XX`).
        Self.write(atMost: 6 * text.count + 2, to: &bytes) { out in
            var index = 0
            Self.put(UInt8(ascii: "\""), at: &index, in: out)
            for byte in text {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                    Self.put(UInt8(ascii: "\\"), at: &index, in: out)
                    Self.put(byte, at: &index, in: out)
                case UInt8(ascii: "\n"):
                    Self.put(UInt8(ascii: "\\"), at: &index, in: out)
                    Self.put(UInt8(ascii: "n"), at: &index, in: out)
                case UInt8(ascii: "\r"):
                    Self.put(UInt8(ascii: "\\"), at: &index, in: out)
                    Self.put(UInt8(ascii: "r"), at: &index, in: out)
                case UInt8(ascii: "\t"):
                    Self.put(UInt8(ascii: "\\"), at: &index, in: out)
                    Self.put(UInt8(ascii: "t"), at: &index, in: out)
                case 0..<0x20:
                    for escaped in [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0")] {
                        Self.put(escaped, at: &index, in: out)
                    }
                    Self.put(Self.hexDigits[Int(byte >> 4)], at: &index, in: out)
                    Self.put(Self.hexDigits[Int(byte & 0x0F)], at: &index, in: out)
                default:
                    Self.put(byte, at: &index, in: out)
                }
            }
            Self.put(UInt8(ascii: "\""), at: &index, in: out)
            return index
        }
    }

    /// Whether `text` has a quote, a backslash or a control character, looked for eight bytes at a time: a
    /// message line's body text and digest are nearly always plain.
    static func needsEscaping(_ text: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let base = text.baseAddress else { return false }
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        // A byte of `word` that is zero sets its high bit here (and only a lower zero byte can set another).
        func hasZeroByte(_ word: UInt64) -> Bool { (word &- ones) & ~word & highs != 0 }
        var offset = 0
        while text.count - offset >= 8 {
            let word = UnsafeRawPointer(base + offset).loadUnaligned(as: UInt64.self)
            // Bytes under 0x20 (those of 0x80 and over excluded by `~word`), then `"` and `\`.
            let control = (word &- ones &* 0x20) & ~word & highs != 0
            if control || hasZeroByte(word ^ (ones &* 0x22)) || hasZeroByte(word ^ (ones &* 0x5C)) { return true }
            offset += 8
        }
        while offset < text.count {
            let byte = base[offset]
            if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { return true }
            offset += 1
        }
        return false
    }

    /// `thousandths / 1000` as `Double`'s `description` writes it (`1.5`, `0.021`, `2.0`), without formatting a
    /// floating-point value.
    static func appendThousandths(_ thousandths: Int, to bytes: inout [UInt8]) {
        guard thousandths.magnitude < 1_000_000_000_000_000 else {
            bytes += (Double(thousandths) / 1_000).description.utf8
            return
        }
        if thousandths < 0 { bytes.append(UInt8(ascii: "-")) }
        var fraction = Int(thousandths.magnitude % 1_000)
        Self.appendDecimal(UInt64(thousandths.magnitude / 1_000), to: &bytes)
        bytes.append(UInt8(ascii: "."))
        var width = 3
        while width > 1 && fraction % 10 == 0 {
            fraction /= 10
            width -= 1
        }
        Self.appendDecimal(fraction, width: width, to: &bytes)
    }

    /// `value` in decimal, without the String that `String(value)` would build.
    static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        Self.appendDecimal(UInt64(value.magnitude), to: &bytes)
    }

    /// Message numbers and byte counts are UInt64 on the wire: any of them, not only those an Int holds.
    static func appendDecimal(_ value: UInt64, to bytes: inout [UInt8]) {
        Self.appendDecimal(value, width: 1, to: &bytes)
    }

    /// `value` in decimal with leading zeros to `width` digits (a timestamp's fields).
    static func appendDecimal(_ value: Int, width: Int, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        Self.appendDecimal(UInt64(value.magnitude), width: width, to: &bytes)
    }

    static func appendDecimal(_ value: UInt64, width: Int, to bytes: inout [UInt8]) {
        var digits = 1
        var rest = value / 10
        while rest > 0 {
            digits += 1
            rest /= 10
        }
        let count = max(digits, width)
        Self.write(atMost: count, to: &bytes) { out in
            var remaining = value
            for index in stride(from: count - 1, through: 0, by: -1) {
                (out + index).initialize(to: UInt8(ascii: "0") + UInt8(remaining % 10))
                remaining /= 10
            }
            return count
        }
    }
}
