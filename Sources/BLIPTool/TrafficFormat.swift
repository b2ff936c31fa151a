internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation

/// How `blip decode` and `blip proxy` show decoded frames and messages: the same JSON fields and the same
/// text, so that a live log and a decoded capture read alike.
enum TrafficFormat {
    static let redacted = "(redacted)"

    static func header(_ header: BLIPFrameHeader, dialect: BLIPDialect) -> [String: Any] {
        [
            "number": Int(header.messageNumber),
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
            json["ack_bytes"] = Int(count)
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

    /// The message's fields, as `blip decode --json` and `blip proxy --json` write them; `redacting` names
    /// properties whose values are replaced by ``redacted``.
    static func messageFields(_ message: BLIPTrafficDecoder.Message, redacting: Set<String> = []) -> [(
        String, JSONValue
    )] {
        var fields: [(String, JSONValue)] = [
            ("number", .int(Int(message.number))),
            ("type", .string("\(message.type)")),
            ("flags", .array(Self.flagNames(message.flags).map { .string($0) })),
            (
                "properties",
                .array(
                    Self.properties(message.properties, redacting: redacting).map {
                        .array([.string($0.0), .string($0.1)])
                    }
                )
            ),
            ("body_length", .int(message.bodyLength)),
            ("body_sha256", message.bodySHA256.map { .string($0) } ?? .null),
        ]
        if let text = message.bodyText { fields.append(("body_text", .string(text))) }
        return fields
    }

    static func messageLine(_ message: BLIPTrafficDecoder.Message, redacting: Set<String> = []) -> String {
        let shown = Self.properties(message.properties, redacting: redacting).map { "\($0.0): \($0.1)" }
            .joined(separator: ", ")
        let preview =
            message.bodyText.map(Self.preview) ?? message.bodySHA256.map { "sha256 \($0.prefix(16))..." } ?? ""
        return "\(message.type)#\(message.number) complete  {\(shown)}  body \(message.bodyLength) bytes \(preview)"
    }

    /// The first 60 bytes of `text` (whole characters' scalars), quoted, newlines as `\n`. Works on bytes:
    /// walking `Character`s here cost `blip proxy` more than decoding the message did.
    static func preview(_ text: String) -> String {
        var bytes: [UInt8] = [UInt8(ascii: "\"")]
        bytes.reserveCapacity(72)
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
        if truncated { bytes += Array("...".utf8) }
        bytes.append(UInt8(ascii: "\""))
        return String(decoding: bytes, as: UTF8.self)
    }

    static func properties(_ properties: BLIPProperties, redacting: Set<String>) -> [(String, String)] {
        properties.map { ($0.name, redacting.contains($0.name) ? Self.redacted : $0.value) }
    }

    static func flagNames(_ flags: BLIPFrameFlags) -> [String] {
        [
            (BLIPFrameFlags.compressed, "compressed"), (.urgent, "urgent"), (.noReply, "noReply"),
            (.moreComing, "moreComing"), (.meta, "meta"),
        ]
        .filter { flags.contains($0.0) }
        .map(\.1)
    }
}
