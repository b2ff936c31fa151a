internal import BLIPInspection
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
        JSONWriter.appendThousandths(Self.microseconds(duration), to: &bytes)
        bytes += " ms".utf8
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
            json.thousandths(Self.microseconds(duration))
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
        for field in head.fields { json.stringArray([field.name.rawName, field.value]) }
        json.endArray()
        json.endObject()
    }

    /// The duration in whole microseconds (halves away from zero): milliseconds to three places.
    static func microseconds(_ duration: Duration) -> Int {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        let (whole, rest) = nanoseconds.quotientAndRemainder(dividingBy: 1_000)
        return rest.magnitude >= 500 ? whole + nanoseconds.signum() : whole
    }

    /// `2026-11-23T10:04:05.123456Z` (UTC) with the day, `10:04:05.123` without it (text lines). The
    /// calendar date is worked out from the day number, not by `gmtime_r`, which took glibc's time-zone lock
    /// for every line; the fields are written in one pass.
    static func writeTime(_ date: Date, withDay: Bool, into bytes: inout [UInt8]) {
        let interval = date.timeIntervalSince1970
        let seconds = Int(interval.rounded(.down))
        let micros = Int(((interval - Double(seconds)) * 1_000_000).rounded(.down))
        let (days, secondOfDay) = Self.floorDivision(seconds, 86_400)
        var (year, month, day) = (0, 0, 0)
        if withDay {
            (year, month, day) = Self.civilDate(daysSince1970: days)
            if !(0...9_999).contains(year) {
                // More than four digits, or a sign: written ahead, and the four-digit slot left out below.
                JSONWriter.appendDecimal(year, width: 4, to: &bytes)
            }
        }
        let fourDigitYear = (0...9_999).contains(year)
        JSONWriter.write(atMost: 27, to: &bytes) { out in
            var index = 0
            if withDay {
                if fourDigitYear { JSONWriter.putDigits(year, count: 4, at: &index, in: out) }
                JSONWriter.put(UInt8(ascii: "-"), at: &index, in: out)
                JSONWriter.putDigits(month, count: 2, at: &index, in: out)
                JSONWriter.put(UInt8(ascii: "-"), at: &index, in: out)
                JSONWriter.putDigits(day, count: 2, at: &index, in: out)
                JSONWriter.put(UInt8(ascii: "T"), at: &index, in: out)
            }
            JSONWriter.putDigits(secondOfDay / 3_600, count: 2, at: &index, in: out)
            JSONWriter.put(UInt8(ascii: ":"), at: &index, in: out)
            JSONWriter.putDigits(secondOfDay / 60 % 60, count: 2, at: &index, in: out)
            JSONWriter.put(UInt8(ascii: ":"), at: &index, in: out)
            JSONWriter.putDigits(secondOfDay % 60, count: 2, at: &index, in: out)
            JSONWriter.put(UInt8(ascii: "."), at: &index, in: out)
            if withDay {
                JSONWriter.putDigits(micros, count: 6, at: &index, in: out)
                JSONWriter.put(UInt8(ascii: "Z"), at: &index, in: out)
            } else {
                JSONWriter.putDigits(micros / 1_000, count: 3, at: &index, in: out)
            }
            return index
        }
    }

    /// Quotient rounded down, and a remainder that is never negative (times before 1970 too).
    private static func floorDivision(_ value: Int, _ divisor: Int) -> (quotient: Int, remainder: Int) {
        let (quotient, remainder) = value.quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }

    /// The proleptic Gregorian date of a day counted from 1970-01-01. Counts in 400-year eras (146 097 days
    /// each) of years that begin on March 1, so that a leap day is the last day of its year.
    static func civilDate(daysSince1970 days: Int) -> (year: Int, month: Int, day: Int) {
        let (era, dayOfEra) = Self.floorDivision(days + 719_468, 146_097)  // day 0: 0000-03-01
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = era * 400 + yearOfEra + (month <= 2 ? 1 : 0)
        return (year, month, day)
    }
}
