import BLIPWire
import Dispatch
import Foundation
import NIOCore
import Testing

/// Runs `Fixtures/reference/blip_ref_decode.py`, an independent decoder written in Python with zlib only,
/// over frames our encoder wrote. For the seed dialect it is the only outside check there is.
@Suite("Independent reference decoder")
struct ReferenceDecoderTests {
    static let python: String? = ["/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"]
        .first { FileManager.default.isExecutableFile(atPath: $0) }

    struct Sent {
        var number: UInt64
        var type: BLIPMessageType
        var flags: BLIPFrameFlags
        var properties: BLIPProperties
        var body: [UInt8]
    }

    @Test(
        "our frames decode with the reference decoder in every dialect",
        .enabled(if: python != nil, "needs python3"),
        arguments: BLIPDialect.allCases
    )
    func crossCheck(dialect: BLIPDialect) async throws {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("blip-ref-\(dialect)-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }

        let encoder = BLIPFrameEncoder(dialect: dialect)
        let sent: [Sent] = [
            Sent(
                number: 1,
                type: .request,
                flags: [],
                properties: ["Profile": "echo", "X-Test": "1"],
                body: Array("Hello, BLIP!".utf8)
            ),
            Sent(
                number: 2,
                type: .request,
                flags: .compressed,
                properties: ["Profile": "changes", "Content-Type": "application/json"],
                body: TestData.text(120_000)
            ),
            Sent(number: 3, type: .request, flags: [.urgent, .noReply], properties: ["Profile": "note"], body: []),
            Sent(
                number: 4,
                type: .request,
                flags: .compressed,
                properties: ["Profile": "blob"],
                body: TestData.random(40_000)
            ),
            Sent(number: 1, type: .response, flags: [], properties: [:], body: TestData.random(70_000)),
            Sent(
                number: 2,
                type: .error,
                flags: [],
                properties: ["Error-Domain": "BLIP", "Error-Code": "404"],
                body: Array("no handler".utf8)
            ),
        ]
        // Interleave the frames of all messages, and an ACK in the dialects that have them.
        var pending: [(index: Int, header: BLIPFrameHeader, data: ByteBuffer)] = []
        for (index, message) in sent.enumerated() {
            var data = ByteBuffer()
            var flags = message.flags
            if !(try encoder.writeMessageData(
                properties: message.properties,
                body: ByteBuffer(bytes: message.body),
                compressed: flags.contains(.compressed),
                into: &data
            )) {
                flags.remove(.compressed)
            }
            pending.append(
                (index, BLIPFrameHeader(messageNumber: message.number, type: message.type, flags: flags), data)
            )
        }
        var fileIndex = 0
        func write(_ frame: ByteBuffer, name: String) throws {
            let file = directory.appendingPathComponent(String(format: "f%03d-c2s-%@.bin", fileIndex, name))
            try Data(frame.readableBytesView).write(to: file)
            fileIndex += 1
        }
        while !pending.isEmpty {
            for position in pending.indices.reversed() {
                var output = ByteBuffer()
                _ = try encoder.encodeFrame(
                    pending[position].header,
                    data: &pending[position].data,
                    endOfMessage: true,
                    maximumFrameSize: 4096,
                    into: &output
                )
                try write(output, name: "\(pending[position].header.type)\(pending[position].header.messageNumber)")
                if pending[position].data.readableBytes == 0 { pending.remove(at: position) }
            }
            if dialect.hasFlowControl && fileIndex > 10 && fileIndex < 15 {
                var ack = ByteBuffer()
                try encoder.encodeACK(.ackResponse, messageNumber: 7, byteCount: 50_000, into: &ack)
                try write(ack, name: "ACK_RPY7")
            }
        }

        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.python!)
        process.arguments = [
            Fixtures.url("reference/blip_ref_decode.py").path, "--dialect",
            dialect == .blip3 ? "blip3" : dialect == .blip2 ? "blip2" : "seed",
            directory.path,
        ]
        let output = Pipe()
        let errors = Pipe()
        process.standardOutput = output
        process.standardError = errors
        try process.run()
        // Waiting for the decoder blocks a thread: not one of the two of the cooperative pool, which every
        // other suite needs meanwhile.
        let (data, errorText) = await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                let data = output.fileHandleForReading.readDataToEndOfFile()
                let errorText = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
                process.waitUntilExit()
                continuation.resume(returning: (data, errorText))
            }
        }
        try #require(process.terminationStatus == 0, "reference decoder failed: \(errorText)")

        let json = try JSONSerialization.jsonObject(with: data) as! [String: [[String: Any]]]
        let decoded = try #require(json["c2s"])
        let messages = decoded.filter { $0["body_sha256"] != nil }
        #expect(messages.count == sent.count)
        #expect(decoded.allSatisfy { $0["incomplete"] == nil })
        for message in sent {
            let name = "\(message.type)"
            let match = messages.first {
                ($0["number"] as! Int) == Int(message.number) && ($0["type"] as! String) == name
            }
            let found = try #require(match, "\(name)#\(message.number) decoded")
            #expect(propertyPairs(found["properties"]) == pairs(message.properties))
            #expect(found["body_len"] as? Int == message.body.count)
            #expect(found["body_sha256"] as? String == ByteBuffer(bytes: message.body).sha256Hex)
            #expect(found["urgent"] as? Bool == message.flags.contains(.urgent))
            #expect(found["no_reply"] as? Bool == message.flags.contains(.noReply))
        }
        if dialect.hasFlowControl {
            let acks = decoded.filter { $0["ack_bytes"] != nil }
            #expect(!acks.isEmpty && acks.allSatisfy { $0["ack_bytes"] as? Int == 50_000 })
        }
    }
}
