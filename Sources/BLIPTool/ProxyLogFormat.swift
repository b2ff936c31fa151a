internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation
internal import NIOCore

/// How `blip proxy` writes what it sees: a line of text per event, or a JSON object per line whose message
/// fields are those of `blip decode --json`.
struct ProxyLogFormat: Sendable {
    var json: Bool
    var verbose: Bool
    var redactedProperties: Set<String>

    /// The line for `event`, or nil for an event this format leaves out.
    func line(for event: BLIPInspectingProxy.Event) -> String? {
        var bytes: [UInt8] = []
        return self.write(event, into: &bytes) ? String(decoding: bytes, as: UTF8.self) : nil
    }

    /// Appends the line for `event` (without its newline) to `bytes`; false for an event this format leaves
    /// out. Message lines are written as bytes, not built as strings: the proxy writes one per message on
    /// the relay's event loop.
    func write(_ event: BLIPInspectingProxy.Event, into bytes: inout [UInt8]) -> Bool {
        if self.json {
            var json = JSONWriter(appendingTo: bytes)
            bytes = []  // the writer's storage is then its own: appending does not copy it
            json.beginObject()
            self.writeJSONFields(event, into: &json)
            json.endObject()
            bytes = json.bytes
            return true
        }
        return self.writeText(event, into: &bytes)
    }

    private func writeText(_ event: BLIPInspectingProxy.Event, into bytes: inout [UInt8]) -> Bool {
        guard case .message(let direction, let message, let duration) = event.kind else {
            guard let rest = self.textRest(event.kind) else { return false }
            Self.writeTextPrefix(event, into: &bytes)
            bytes += rest.utf8
            return true
        }
        Self.writeTextPrefix(event, into: &bytes)
        bytes += direction.rawValue.utf8
        bytes.append(UInt8(ascii: " "))
        TrafficFormat.writeMessageLine(message, redacting: self.redactedProperties, into: &bytes)
        bytes += "  ".utf8
        JSONWriter.appendDecimal(message.frameCount, to: &bytes)
        bytes += (message.frameCount == 1 ? " frame in " : " frames in ").utf8
        bytes += "\(Self.milliseconds(duration)) ms".utf8
        return true
    }

    /// `10:04:05.123 #7 `: the time and the connection's number.
    private static func writeTextPrefix(_ event: BLIPInspectingProxy.Event, into bytes: inout [UInt8]) {
        Self.writeTime(event.time, withDay: false, into: &bytes)
        bytes += " #".utf8
        JSONWriter.appendDecimal(event.connection, to: &bytes)
        bytes.append(UInt8(ascii: " "))
    }

    /// A text line after its time and connection number, for the events other than messages.
    private func textRest(_ kind: BLIPInspectingProxy.Event.Kind) -> String? {
        switch kind {
        case .accepted(let address):
            return "accepted from \(address)"
        case .handshake(let request, let response, let dialect):
            var line = "\(request.startLine) -> \(response.startLine)"
            if let subprotocol = response["Sec-WebSocket-Protocol"] { line += "  subprotocol \(subprotocol)" }
            if let dialect { line += "  decoded as \(dialect.rawValue)" }
            if self.verbose {
                for field in request.fields { line += "\n    > \(field.name): \(field.value)" }
                for field in response.fields { line += "\n    < \(field.name): \(field.value)" }
            }
            return line
        case .upstreamUnreachable(let reason):
            return "!! \(reason) (answered 502)"
        case .message:
            return nil  // written as bytes by writeText
        case .ack(let direction, let header, let count):
            return self.verbose ? "\(direction.rawValue) \(header) acknowledges \(count) bytes" : nil
        case .control(let direction, let control):
            switch control {
            case .close(let code, let reason):
                return "\(direction.rawValue) close \(code.map(String.init) ?? "(no code)") \(reason)"
            case .text(let payload):
                return "\(direction.rawValue) !! a text message of \(payload.readableBytes) bytes (not BLIP)"
            case .ping(let payload):
                return self.verbose ? "\(direction.rawValue) ping (\(payload.readableBytes) bytes)" : nil
            case .pong(let payload):
                return self.verbose ? "\(direction.rawValue) pong (\(payload.readableBytes) bytes)" : nil
            }
        case .decodingStopped(let direction, let reason):
            return "\(direction.rawValue) !! \(reason); no longer decoded, still relayed"
        case .closed(let fromClient, let fromServer, let incomplete):
            let rest = incomplete.isEmpty ? "" : "; incomplete: \(incomplete.joined(separator: ", "))"
            return "closed (\(fromClient) bytes from the client, \(fromServer) from the server\(rest))"
        }
    }

    private func writeJSONFields(_ event: BLIPInspectingProxy.Event, into json: inout JSONWriter) {
        json.int("connection", event.connection)
        json.key("time")
        json.plainString { Self.writeTime(event.time, withDay: true, into: &$0) }
        switch event.kind {
        case .accepted(let address):
            json.string("event", "accepted")
            json.string("remote_address", address)
        case .handshake(let request, let response, let dialect):
            json.string("event", "handshake")
            json.key("request")
            Self.writeHead(request, into: &json)
            json.key("response")
            Self.writeHead(response, into: &json)
            json.key("status")
            if let status = response.status { json.int(status) } else { json.null() }
            json.key("dialect")
            if let dialect { json.string(dialect.rawValue) } else { json.null() }
        case .upstreamUnreachable(let reason):
            json.string("event", "upstream_unreachable")
            json.string("error", reason)
        case .message(let direction, let message, let duration):
            json.string("event", "message")
            json.string("direction", direction.rawValue)
            TrafficFormat.writeMessageFields(message, redacting: self.redactedProperties, into: &json)
            json.int("frames", message.frameCount)
            json.key("duration_ms")
            json.double(Self.milliseconds(duration))
        case .ack(let direction, let header, let count):
            json.string("event", "ack")
            json.string("direction", direction.rawValue)
            json.int("number", header.messageNumber)
            json.string("type", header.type.description)
            json.int("ack_bytes", count)
        case .control(let direction, let control):
            switch control {
            case .ping(let payload):
                json.string("event", "ping")
                json.int("length", payload.readableBytes)
            case .pong(let payload):
                json.string("event", "pong")
                json.int("length", payload.readableBytes)
            case .close(let code, let reason):
                json.string("event", "close")
                json.key("code")
                if let code { json.int(Int(code)) } else { json.null() }
                json.string("reason", reason)
            case .text(let payload):
                json.string("event", "text")
                json.int("length", payload.readableBytes)
            }
            json.string("direction", direction.rawValue)
        case .decodingStopped(let direction, let reason):
            json.string("event", "decoding_stopped")
            json.string("direction", direction.rawValue)
            json.string("error", reason)
        case .closed(let fromClient, let fromServer, let incomplete):
            json.string("event", "closed")
            json.int("bytes_from_client", fromClient)
            json.int("bytes_from_server", fromServer)
            json.key("incomplete")
            json.stringArray(incomplete)
        }
    }

    private static func writeHead(_ head: RelayedHTTPHead, into json: inout JSONWriter) {
        json.beginObject()
        json.string("start_line", head.startLine)
        json.key("headers")
        json.beginArray()
        for field in head.fields { json.stringArray([field.name, field.value]) }
        json.endArray()
        json.endObject()
    }

    static func milliseconds(_ duration: TimeAmount) -> Double {
        (Double(duration.nanoseconds) / 1_000).rounded() / 1_000
    }

    /// `2026-11-23T10:04:05.123456Z` (UTC) with the day, `10:04:05.123` without it (text lines).
    static func writeTime(_ date: Date, withDay: Bool, into bytes: inout [UInt8]) {
        let interval = date.timeIntervalSince1970
        var seconds = time_t(interval.rounded(.down))
        let micros = Int(((interval - Double(seconds)) * 1_000_000).rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        if withDay {
            JSONWriter.appendDecimal(Int(parts.tm_year) + 1900, width: 4, to: &bytes)
            bytes.append(UInt8(ascii: "-"))
            JSONWriter.appendDecimal(Int(parts.tm_mon) + 1, width: 2, to: &bytes)
            bytes.append(UInt8(ascii: "-"))
            JSONWriter.appendDecimal(Int(parts.tm_mday), width: 2, to: &bytes)
            bytes.append(UInt8(ascii: "T"))
        }
        JSONWriter.appendDecimal(Int(parts.tm_hour), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        JSONWriter.appendDecimal(Int(parts.tm_min), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: ":"))
        JSONWriter.appendDecimal(Int(parts.tm_sec), width: 2, to: &bytes)
        bytes.append(UInt8(ascii: "."))
        if withDay {
            JSONWriter.appendDecimal(micros, width: 6, to: &bytes)
            bytes.append(UInt8(ascii: "Z"))
        } else {
            JSONWriter.appendDecimal(micros / 1_000, width: 3, to: &bytes)
        }
    }
}
