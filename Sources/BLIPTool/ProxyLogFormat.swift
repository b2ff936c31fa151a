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
        self.json ? self.jsonLine(event) : self.textLine(event)
    }

    private func textLine(_ event: BLIPInspectingProxy.Event) -> String? {
        let prefix = "\(Self.clock(event.time)) #\(event.connection)"
        switch event.kind {
        case .accepted(let address):
            return "\(prefix) accepted from \(address)"
        case .handshake(let request, let response, let dialect):
            var line = "\(prefix) \(request.startLine) -> \(response.startLine)"
            if let subprotocol = response["Sec-WebSocket-Protocol"] { line += "  subprotocol \(subprotocol)" }
            if let dialect { line += "  decoded as \(dialect.rawValue)" }
            if self.verbose {
                for field in request.fields { line += "\n    > \(field.name): \(field.value)" }
                for field in response.fields { line += "\n    < \(field.name): \(field.value)" }
            }
            return line
        case .upstreamUnreachable(let reason):
            return "\(prefix) !! \(reason) (answered 502)"
        case .message(let direction, let message, let duration):
            return
                "\(prefix) \(direction.rawValue) \(TrafficFormat.messageLine(message, redacting: self.redactedProperties))"
                + "  \(message.frameCount) frame\(message.frameCount == 1 ? "" : "s") in \(Self.milliseconds(duration)) ms"
        case .ack(let direction, let header, let count):
            return self.verbose ? "\(prefix) \(direction.rawValue) \(header) acknowledges \(count) bytes" : nil
        case .control(let direction, let control):
            switch control {
            case .close(let code, let reason):
                return "\(prefix) \(direction.rawValue) close \(code.map(String.init) ?? "(no code)") \(reason)"
            case .text(let payload):
                return "\(prefix) \(direction.rawValue) !! a text message of \(payload.readableBytes) bytes (not BLIP)"
            case .ping(let payload):
                return self.verbose ? "\(prefix) \(direction.rawValue) ping (\(payload.readableBytes) bytes)" : nil
            case .pong(let payload):
                return self.verbose ? "\(prefix) \(direction.rawValue) pong (\(payload.readableBytes) bytes)" : nil
            }
        case .decodingStopped(let direction, let reason):
            return "\(prefix) \(direction.rawValue) !! \(reason); no longer decoded, still relayed"
        case .closed(let fromClient, let fromServer, let incomplete):
            let rest = incomplete.isEmpty ? "" : "; incomplete: \(incomplete.joined(separator: ", "))"
            return "\(prefix) closed (\(fromClient) bytes from the client, \(fromServer) from the server\(rest))"
        }
    }

    private func jsonLine(_ event: BLIPInspectingProxy.Event) -> String? {
        var fields: [(String, JSONValue)] = [
            ("connection", .int(event.connection)), ("time", .string(Self.timestamp(event.time))),
        ]
        switch event.kind {
        case .accepted(let address):
            fields += [("event", .string("accepted")), ("remote_address", .string(address))]
        case .handshake(let request, let response, let dialect):
            fields += [
                ("event", .string("handshake")), ("request", Self.head(request)), ("response", Self.head(response)),
                ("status", response.status.map { .int($0) } ?? .null),
                ("dialect", dialect.map { .string($0.rawValue) } ?? .null),
            ]
        case .upstreamUnreachable(let reason):
            fields += [("event", .string("upstream_unreachable")), ("error", .string(reason))]
        case .message(let direction, let message, let duration):
            fields += [("event", .string("message")), ("direction", .string(direction.rawValue))]
            fields += TrafficFormat.messageFields(message, redacting: self.redactedProperties)
            fields += [("frames", .int(message.frameCount)), ("duration_ms", .double(Self.milliseconds(duration)))]
        case .ack(let direction, let header, let count):
            fields += [
                ("event", .string("ack")), ("direction", .string(direction.rawValue)),
                ("number", .int(Int(header.messageNumber))), ("type", .string("\(header.type)")),
                ("ack_bytes", .int(Int(count))),
            ]
        case .control(let direction, let control):
            switch control {
            case .ping(let payload):
                fields += [("event", .string("ping")), ("length", .int(payload.readableBytes))]
            case .pong(let payload):
                fields += [("event", .string("pong")), ("length", .int(payload.readableBytes))]
            case .close(let code, let reason):
                fields += [
                    ("event", .string("close")), ("code", code.map { .int(Int($0)) } ?? .null),
                    ("reason", .string(reason)),
                ]
            case .text(let payload):
                fields += [("event", .string("text")), ("length", .int(payload.readableBytes))]
            }
            fields.append(("direction", .string(direction.rawValue)))
        case .decodingStopped(let direction, let reason):
            fields += [
                ("event", .string("decoding_stopped")), ("direction", .string(direction.rawValue)),
                ("error", .string(reason)),
            ]
        case .closed(let fromClient, let fromServer, let incomplete):
            fields += [
                ("event", .string("closed")), ("bytes_from_client", .int(fromClient)),
                ("bytes_from_server", .int(fromServer)), ("incomplete", .array(incomplete.map { .string($0) })),
            ]
        }
        return JSONValue.object(fields).text
    }

    private static func head(_ head: RelayedHTTPHead) -> JSONValue {
        .object([
            ("start_line", .string(head.startLine)),
            ("headers", .array(head.fields.map { .array([.string($0.name), .string($0.value)]) })),
        ])
    }

    static func milliseconds(_ duration: TimeAmount) -> Double {
        (Double(duration.nanoseconds) / 1_000).rounded() / 1_000
    }

    /// `2026-11-23T10:04:05.123456Z`.
    static func timestamp(_ date: Date) -> String {
        let (day, time) = Self.split(date)
        return "\(day)T\(time)Z"
    }

    /// `10:04:05.123` (UTC), for text lines.
    static func clock(_ date: Date) -> String {
        String(Self.split(date).time.dropLast(3))
    }

    private static func split(_ date: Date) -> (day: String, time: String) {
        let interval = date.timeIntervalSince1970
        var seconds = time_t(interval.rounded(.down))
        let micros = Int(((interval - Double(seconds)) * 1_000_000).rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let fraction = String(micros + 1_000_000).dropFirst()
        return (
            "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))",
            "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)).\(fraction)"
        )
    }
}
