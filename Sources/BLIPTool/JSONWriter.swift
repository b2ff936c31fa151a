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
        self.separate()
        self.bytes.append(UInt8(ascii: "\""))
        key.withUTF8Buffer { self.bytes.append(contentsOf: $0) }
        self.bytes.append(UInt8(ascii: "\""))
        self.bytes.append(UInt8(ascii: ":"))
        self.afterValue = false
    }

    mutating func string(_ value: String) {
        self.separate()
        var value = value
        value.withUTF8 { self.writeEscaped($0) }
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

    /// Quotes around the UTF-8 bytes as they are; quotes, backslashes and control characters escaped.
    private mutating func writeEscaped(_ bytes: UnsafeBufferPointer<UInt8>) {
        self.bytes.append(UInt8(ascii: "\""))
        if !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            self.bytes.append(contentsOf: bytes)
        } else {
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                    self.bytes += [UInt8(ascii: "\\"), byte]
                case UInt8(ascii: "\n"): self.bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                case UInt8(ascii: "\r"): self.bytes += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                case UInt8(ascii: "\t"): self.bytes += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                case 0..<0x20:
                    self.bytes += Array("\\u00".utf8)
                    self.bytes += [Self.hexDigits[Int(byte >> 4)], Self.hexDigits[Int(byte & 0x0F)]]
                default: self.bytes.append(byte)
                }
            }
        }
        self.bytes.append(UInt8(ascii: "\""))
    }

    /// `value` in decimal, without the String that `String(value)` would build.
    static func appendDecimal(_ value: Int, to bytes: inout [UInt8]) {
        if value < 0 { bytes.append(UInt8(ascii: "-")) }
        Self.appendDecimal(UInt64(value.magnitude), to: &bytes)
    }

    /// Message numbers and byte counts are UInt64 on the wire: any of them, not only those an Int holds.
    static func appendDecimal(_ value: UInt64, to bytes: inout [UInt8]) {
        var magnitude = value
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // up to 24 digits, the last first
        let count = withUnsafeMutableBytes(of: &digits) { buffer in
            var count = 0
            repeat {
                buffer[count] = UInt8(ascii: "0") + UInt8(magnitude % 10)
                magnitude /= 10
                count += 1
            } while magnitude > 0
            return count
        }
        withUnsafeBytes(of: &digits) { buffer in
            for index in stride(from: count - 1, through: 0, by: -1) { bytes.append(buffer[index]) }
        }
    }

    /// `value` in decimal with leading zeros to `width` digits (a timestamp's fields).
    static func appendDecimal(_ value: Int, width: Int, to bytes: inout [UInt8]) {
        var divisor = 1
        for _ in 1..<max(width, 1) { divisor *= 10 }
        while divisor > value && divisor > 1 {
            bytes.append(UInt8(ascii: "0"))
            divisor /= 10
        }
        Self.appendDecimal(value, to: &bytes)
    }
}
