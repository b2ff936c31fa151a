internal import Foundation

/// A JSON value with its object keys in a fixed order, written by hand: `blip proxy` writes one per message,
/// and JSONSerialization (which sorts keys with locale-aware comparisons on Linux) cost it more than the
/// relay and the decoding together.
enum JSONValue {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case null
    case array([JSONValue])
    case object([(String, JSONValue)])

    /// The compact text, keys in the order given.
    var text: String {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        self.write(into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// The same value as Foundation objects, for output that JSONSerialization writes as a whole.
    var foundationObject: Any {
        switch self {
        case .string(let value): return value
        case .int(let value): return value
        case .double(let value): return value
        case .bool(let value): return value
        case .null: return NSNull()
        case .array(let values): return values.map(\.foundationObject)
        case .object(let fields): return Dictionary(fields.map { ($0.0, $0.1.foundationObject) }) { $1 }
        }
    }

    func write(into out: inout [UInt8]) {
        switch self {
        case .string(let value): Self.writeString(value, into: &out)
        case .int(let value): out += String(value).utf8
        case .double(let value): out += (value.isFinite ? "\(value)" : "null").utf8
        case .bool(let value): out += (value ? "true" : "false").utf8
        case .null: out += "null".utf8
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            for (index, (key, value)) in fields.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// A JSON string: UTF-8 bytes as they are, quotes, backslashes and control characters escaped. Works
    /// on the contiguous UTF-8 (`withUTF8`): iterating `utf8` showed in profiles.
    private static func writeString(_ value: String, into out: inout [UInt8]) {
        var value = value
        value.withUTF8 { bytes in
            out.append(UInt8(ascii: "\""))
            if !bytes.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
                out.append(contentsOf: bytes)
            } else {
                for byte in bytes {
                    switch byte {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"):
                        out += [UInt8(ascii: "\\"), byte]
                    case UInt8(ascii: "\n"): out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
                    case UInt8(ascii: "\r"): out += [UInt8(ascii: "\\"), UInt8(ascii: "r")]
                    case UInt8(ascii: "\t"): out += [UInt8(ascii: "\\"), UInt8(ascii: "t")]
                    case 0..<0x20:
                        out += Array("\\u00".utf8) + [Self.hexDigits[Int(byte >> 4)], Self.hexDigits[Int(byte & 0x0F)]]
                    default: out.append(byte)
                    }
                }
            }
            out.append(UInt8(ascii: "\""))
        }
    }
}
