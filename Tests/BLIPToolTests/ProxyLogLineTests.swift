import BLIPWire
import Foundation
import NIOCore
import Testing

@testable import BLIPInspection
@testable import BLIPTool
@testable import BLIPWebSocket

@Suite("blip proxy's log lines, written as bytes")
struct ProxyLogLineTests {
    @Test("JSONWriter: keys in order, commas, escapes, numbers and null, and what JSONSerialization reads back")
    func writerOutput() throws {
        var json = JSONWriter()
        json.beginObject()
        json.string("text", "a \"quoted\" \\ back\nslash\t\r\u{01} é")
        json.int("negative", -42)
        json.int("zero", 0)
        json.int("largest", Int.max)
        json.key("nothing")
        json.null()
        json.key("ratio")
        json.double(1.5)
        json.key("nested")
        json.beginArray()
        json.stringArray(["x", "y"])
        json.beginObject()
        json.endObject()
        json.stringArray([])
        json.endArray()
        json.endObject()
        let text = String(decoding: json.bytes, as: UTF8.self)
        #expect(
            text
                == #"{"text":"a \"quoted\" \\ back\nslash\t\r\u0001 é","negative":-42,"zero":0,"#
                + #""largest":9223372036854775807,"nothing":null,"ratio":1.5,"nested":[["x","y"],{},[]]}"#
        )
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.bytes)) as? [String: Any])
        #expect(object["text"] as? String == "a \"quoted\" \\ back\nslash\t\r\u{01} é")
        #expect(object["largest"] as? Int == Int.max && object["negative"] as? Int == -42)
    }

    @Test("decimals padded to a width, as a timestamp's fields are")
    func paddedDecimals() {
        func padded(_ value: Int, _ width: Int) -> String {
            var bytes: [UInt8] = []
            JSONWriter.appendDecimal(value, width: width, to: &bytes)
            return String(decoding: bytes, as: UTF8.self)
        }
        #expect(padded(0, 2) == "00" && padded(7, 2) == "07" && padded(10, 2) == "10" && padded(123, 2) == "123")
        #expect(padded(45, 6) == "000045" && padded(250_000, 6) == "250000" && padded(999, 3) == "999")
        #expect(padded(5, 1) == "5" && padded(5, 0) == "5")
    }

    @Test("a message's text and JSON lines, exactly; a left-out event writes nothing")
    func exactLines() throws {
        let (_, message, event) = try fixtureMessageEvent(connection: 12)
        let properties = message.properties.map { "\($0.name): \($0.value)" }.joined(separator: ", ")
        let text = ProxyLogFormat(json: false, verbose: false, redactedProperties: []).line(for: event)
        #expect(
            text
                == "14:13:20.250 #12 c2s MSG#1 complete  {\(properties)}  body 12 bytes \"Hello, BLIP!\"  1 frame in 1.5 ms"
        )
        let propertiesJSON = message.properties.map { "[\"\($0.name)\",\"\($0.value)\"]" }.joined(separator: ",")
        let line = ProxyLogFormat(json: true, verbose: false, redactedProperties: []).line(for: event)
        let digest = try #require(message.bodySHA256)
        #expect(
            line
                == #"{"connection":12,"time":"2026-09-21T14:13:20.250000Z","event":"message","direction":"c2s","#
                + #""number":1,"type":"MSG","flags":[],"properties":[\#(propertiesJSON)],"body_length":12,"#
                + #""body_sha256":"\#(digest)","body_text":"Hello, BLIP!","frames":1,"duration_ms":1.5}"#
        )
        let ping = BLIPInspectingProxy.Event(
            connection: 1,
            time: Date(),
            kind: .control(.serverToClient, .ping(.init()))
        )
        var bytes: [UInt8] = Array("kept".utf8)
        #expect(!ProxyLogFormat(json: false, verbose: false, redactedProperties: []).write(ping, into: &bytes))
        #expect(bytes == Array("kept".utf8), "nothing is appended for an event the format leaves out")
        let close = BLIPInspectingProxy.Event(
            connection: 3,
            time: Date(timeIntervalSince1970: 1_790_000_000.000_9),
            kind: .control(.clientToServer, .close(code: 1000, reason: ""))
        )
        #expect(
            ProxyLogFormat(json: false, verbose: false, redactedProperties: []).line(for: close)
                == "14:13:20.000 #3 c2s close 1000 "
        )
    }

    @Test("the other events' JSON lines, exactly as before the lines were written as bytes")
    func otherEvents() {
        let format = ProxyLogFormat(json: true, verbose: true, redactedProperties: [])
        let time = Date(timeIntervalSince1970: 1_790_000_000.5)
        func line(_ kind: BLIPInspectingProxy.Event.Kind) -> String? {
            format.line(for: BLIPInspectingProxy.Event(connection: 2, time: time, kind: kind))
        }
        let start = #"{"connection":2,"time":"2026-09-21T14:13:20.500000Z","event":"#
        let header = BLIPFrameHeader(messageNumber: 7, type: .ackRequest)
        #expect(
            line(.ack(.serverToClient, header, byteCount: 65_536))
                == start + #""ack","direction":"s2c","number":7,"type":"\#(header.type)","ack_bytes":65536}"#
        )
        #expect(
            line(.control(.clientToServer, .close(code: nil, reason: "")))
                == start + #""close","code":null,"reason":"","direction":"c2s"}"#
        )
        #expect(
            line(.decodingStopped(.clientToServer, "a \"bad\" frame\n"))
                == start + #""decoding_stopped","direction":"c2s","error":"a \"bad\" frame\n"}"#
        )
        #expect(
            line(.closed(bytesFromClient: 10, bytesFromServer: 0, incomplete: ["MSG#3", "RPY#4"]))
                == start + #""closed","bytes_from_client":10,"bytes_from_server":0,"incomplete":["MSG#3","RPY#4"]}"#
        )
        #expect(line(.upstreamUnreachable("no")) == start + #""upstream_unreachable","error":"no"}"#)
    }

    @Test("message numbers and ACK counts past Int's range are written, not trapped on (a peer chooses them)")
    func largestNumbers() throws {
        let header = BLIPFrameHeader(messageNumber: .max, type: .ackResponse)
        let ack = BLIPInspectingProxy.Event(
            connection: 1,
            time: Date(timeIntervalSince1970: 0),
            kind: .ack(.clientToServer, header, byteCount: .max)
        )
        let json = try #require(ProxyLogFormat(json: true, verbose: true, redactedProperties: []).line(for: ack))
        #expect(
            json.contains(#""number":18446744073709551615,"#) && json.contains(#""ack_bytes":18446744073709551615}"#)
        )
        let message = BLIPTrafficDecoder.Message(
            number: 1 << 63,
            type: .request,
            flags: [],
            properties: BLIPProperties(),
            bodyLength: 0,
            bodySHA256: nil,
            bodyText: "",
            bodyPrefix: ByteBuffer(),
            frameCount: 1,
            started: .now()
        )
        let event = BLIPInspectingProxy.Event(
            connection: 1,
            time: Date(timeIntervalSince1970: 0),
            kind: .message(.serverToClient, message, duration: .zero)
        )
        let text = ProxyLogFormat(json: false, verbose: false, redactedProperties: []).line(for: event)
        #expect(text?.contains("MSG#9223372036854775808 complete") == true)
        let line = ProxyLogFormat(json: true, verbose: false, redactedProperties: []).line(for: event)
        #expect(line?.contains(#""number":9223372036854775808,"#) == true)
        #expect(TrafficFormat.header(header, dialect: .blip3)["number"] as? UInt64 == .max)
    }
}

/// go-blip's first captured request (three properties, "Hello, BLIP!"), decoded, as the proxy would report
/// it on connection `connection` at a fixed time, 1.5 ms after its first frame.
func fixtureMessageEvent(connection: Int) throws -> (
    frame: ByteBuffer, message: BLIPTrafficDecoder.Message, event: BLIPInspectingProxy.Event
) {
    let path = fixtures.appendingPathComponent("go-blip/01-request-with-properties/f000-c2s-MSG1.bin").path
    let frame = ByteBuffer(bytes: try Data(contentsOf: URL(fileURLWithPath: path)))
    let message = try #require(try BLIPTrafficDecoder(dialect: .blip3).decode(frame).message)
    let event = BLIPInspectingProxy.Event(
        connection: connection,
        time: Date(timeIntervalSince1970: 1_790_000_000.25),
        kind: .message(.clientToServer, message, duration: .microseconds(1_500))
    )
    return (frame, message, event)
}
