internal import BLIPInspection
internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation

/// How `blip decode` and `blip proxy` show decoded frames and messages: the same JSON fields and the same
/// text, so that a live log and a decoded capture read alike.
enum TrafficFormat {
    static let redacted = "(redacted)"

    static func header(_ header: BLIPFrameHeader, dialect: BLIPDialect) -> [String: Any] {
        [
            "number": header.messageNumber,
            "type": "\(header.type)",
            "flags": Self.flagNames(header.flags),
            "wire_flags": String(format: "0x%02X", (try? header.wireFlags(in: dialect)) ?? 0),
        ]
    }

    static func frame(_ frame: BLIPTrafficDecoder.Frame, dialect: BLIPDialect) -> [String: Any] {
        var json = Self.header(frame.header, dialect: dialect)
        json["length"] = frame.length
        switch frame.kind {
        case .ack(let count):
            json["ack_bytes"] = count
        case .malformedACK(let error):
            json["ack_error"] = error
        case .unknownType:
            break
        case .data(let dataLength, let bodyLength, let checksum):
            json["body_length"] = bodyLength
            json["data_length"] = dataLength
            if let checksum {
                json["checksum"] = String(format: "%08X", checksum)
                json["crc"] = "ok"
            }
        }
        return json
    }

    static func frameLine(_ frame: BLIPTrafficDecoder.Frame) -> String {
        switch frame.kind {
        case .ack(let count):
            return "\(frame.header)  len \(frame.length)  acknowledges \(count) bytes"
        case .malformedACK(let error):
            return "\(frame.header)  !! undecodable ACK count (ignored): \(error)"
        case .unknownType:
            return "\(frame.header)  unknown type (ignored)"
        case .data(let dataLength, _, let checksum):
            var line = "\(frame.header)  len \(frame.length)  data \(dataLength)"
            if let checksum { line += "  crc ok \(String(format: "%08X", checksum))" }
            return line
        }
    }

    /// The message's fields, as `blip decode --json` and `blip proxy --json` write them, into the object
    /// `json` has open; `redacting` names properties whose values are replaced by ``redacted``.
    static func writeMessageFields(
        _ message: BLIPTrafficDecoder.Message,
        redacting: Set<String> = [],
        into json: inout JSONWriter
    ) {
        json.int("number", message.number)
        json.string("type", message.type.description)
        json.key("flags")
        json.stringArray(Self.flagNames(message.flags))
        json.key("properties")
        json.beginArray()
        for property in message.properties {
            json.beginArray()
            json.string(property.name)
            json.string(Self.shownValue(of: property, redacting: redacting))
            json.endArray()
        }
        json.endArray()
        json.int("body_length", message.bodyLength)
        json.key("body_sha256")
        if let digest = message.bodySHA256 { json.string(digest) } else { json.null() }
        if let text = message.bodyText { json.string("body_text", text) }
    }

    /// The message's fields as one JSON object (for `blip decode --json`, which writes its output whole).
    static func messageObject(_ message: BLIPTrafficDecoder.Message) -> [String: Any] {
        var json = JSONWriter()
        json.beginObject()
        Self.writeMessageFields(message, into: &json)
        json.endObject()
        // Read back rather than built twice, so that both commands have one list of fields. Our writer's
        // output always reads back; if it ever did not, the object says so instead of going missing.
        guard let object = (try? JSONSerialization.jsonObject(with: Data(json.bytes))) as? [String: Any] else {
            return ["error": "unreadable message fields: \(String(decoding: json.bytes, as: UTF8.self))"]
        }
        return object
    }

    static func messageLine(_ message: BLIPTrafficDecoder.Message, redacting: Set<String> = []) -> String {
        var bytes: [UInt8] = []
        Self.writeMessageLine(message, redacting: redacting, into: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `MSG#3 complete  {Profile: echo}  body 100 bytes "abc..."`, appended to `bytes`.
    static func writeMessageLine(
        _ message: BLIPTrafficDecoder.Message,
        redacting: Set<String> = [],
        into bytes: inout [UInt8]
    ) {
        bytes += message.type.description.utf8
        bytes.append(UInt8(ascii: "#"))
        JSONWriter.appendDecimal(message.number, to: &bytes)
        bytes += " complete  {".utf8
        for (index, property) in message.properties.enumerated() {
            if index > 0 { bytes += ", ".utf8 }
            bytes += property.name.utf8
            bytes += ": ".utf8
            bytes += Self.shownValue(of: property, redacting: redacting).utf8
        }
        bytes += "}  body ".utf8
        JSONWriter.appendDecimal(message.bodyLength, to: &bytes)
        bytes += " bytes ".utf8
        if let text = message.bodyText {
            Self.writePreview(text, into: &bytes)
        } else if let digest = message.bodySHA256 {
            bytes += "sha256 ".utf8
            bytes += digest.utf8.prefix(16)
            bytes += "...".utf8
        }
    }

    /// The first 60 bytes of `text` (whole characters' scalars), quoted, newlines as `\n`. Works on bytes:
    /// walking `Character`s here cost `blip proxy` more than decoding the message did.
    private static func writePreview(_ text: String, into bytes: inout [UInt8]) {
        bytes.append(UInt8(ascii: "\""))
        var count = 0
        var truncated = false
        for byte in text.utf8 {
            if count >= 60 && byte & 0xC0 != 0x80 {
                truncated = true
                break
            }
            if byte == UInt8(ascii: "\n") {
                bytes += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            } else {
                bytes.append(byte)
            }
            count += 1
        }
        if truncated { bytes += "...".utf8 }
        bytes.append(UInt8(ascii: "\""))
    }

    /// A property's value as the logs show it: ``redacted`` when its name is in `redacting`.
    private static func shownValue(of property: BLIPProperty, redacting: Set<String>) -> String {
        redacting.contains(property.name) ? Self.redacted : property.value
    }

    /// The flags' names, in a fixed order.
    private static let namedFlags: [(BLIPFrameFlags, String)] = [
        (.compressed, "compressed"), (.urgent, "urgent"), (.noReply, "noReply"), (.moreComing, "moreComing"),
        (.meta, "meta"),
    ]

    static func flagNames(_ flags: BLIPFrameFlags) -> [String] {
        flags.isEmpty ? [] : Self.namedFlags.filter { flags.contains($0.0) }.map(\.1)
    }
}
