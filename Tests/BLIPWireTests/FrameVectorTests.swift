import BLIPWire
import NIOCore
import Testing

struct FrameVector: Sendable, CustomTestStringConvertible {
    var name: String
    var dialect: BLIPDialect
    var hex: String
    var kind: String
    var number: UInt64?
    var type: String?
    var flags: [String]
    var rawType: UInt8?
    var checksum: UInt32?
    var ackCount: UInt64?
    var properties: [[String]]?
    var bodyText: String?
    var reason: String?
    var reproducible: Bool
    var testDescription: String { self.name }

    static let all: [FrameVector] = {
        let json = try! Fixtures.json("vectors/frames.json")
        return (json["cases"] as! [[String: Any]]).map { item in
            let expect = item["expect"] as! [String: Any]
            return FrameVector(
                name: item["name"] as! String,
                dialect: BLIPDialect(rawValue: item["dialect"] as! String)!,
                hex: item["hex"] as! String,
                kind: expect["kind"] as! String,
                number: (expect["number"] as? Int).map(UInt64.init),
                type: expect["type"] as? String,
                flags: expect["flags"] as? [String] ?? [],
                rawType: (expect["rawType"] as? Int).map(UInt8.init),
                checksum: (expect["checksum"] as? String).map { UInt32($0, radix: 16)! },
                ackCount: (expect["ackCount"] as? Int).map(UInt64.init),
                properties: propertyPairs(expect["properties"]),
                bodyText: expect["bodyText"] as? String,
                reason: expect["reason"] as? String,
                reproducible: item["reproducibleByEncoder"] as! Bool
            )
        }
    }()
}

@Suite("Frame vectors (digest 10.3, 10.5, 10.6, 10.7)")
struct FrameVectorTests {
    @Test("each vector decodes to its expected meaning", arguments: FrameVector.all)
    func decode(_ vector: FrameVector) throws {
        var replay = DirectionReplay(dialect: vector.dialect)
        let frame = ByteBuffer(hex: vector.hex)
        if vector.kind == "error" {
            let error = #expect(throws: BLIPWireError.self) { try replay.receive(frame) }
            #expect(error?.code.caseName == vector.reason)
            #expect(error?.frameIndex == 0)
            return
        }
        try replay.receive(frame)
        let decoded = try #require(replay.frames.first)
        switch (vector.kind, decoded) {
        case ("data", .data(let data)):
            #expect(data.header.messageNumber == vector.number)
            #expect(data.header.type == BLIPMessageType(name: vector.type!))
            #expect(data.header.flags == BLIPFrameFlags(names: vector.flags))
            #expect(data.checksum == vector.checksum)
            if let properties = vector.properties {
                let message = try #require(replay.completed.first)
                #expect(pairs(message.properties) == properties)
                #expect(String(buffer: message.body) == vector.bodyText)
            } else {
                #expect(replay.completed.isEmpty, "more-coming: the message is not complete")
            }
        case ("ack", .ack(let ack)):
            #expect(ack.header.messageNumber == vector.number)
            #expect(ack.header.type == BLIPMessageType(name: vector.type!))
            #expect(ack.header.flags == BLIPFrameFlags(names: vector.flags))
            #expect(ack.byteCount == vector.ackCount)
        case ("malformedACK", .malformedACK(let header, let error)):
            #expect(header.messageNumber == vector.number)
            #expect(error.code == .truncatedVarint)
        case ("unknown", .unknownType(let header)):
            #expect(header.messageNumber == vector.number)
            #expect(header.type.rawValue == vector.rawType)
        default:
            Issue.record("expected \(vector.kind), decoded \(decoded)")
        }
    }

    @Test(
        "our encoder writes each reproducible vector byte for byte",
        arguments: FrameVector.all.filter { $0.reproducible }
    )
    func encode(_ vector: FrameVector) throws {
        var configuration = BLIPFrameEncoder.Configuration(dialect: vector.dialect)
        configuration.skipsIncompressibleData = false  // the vectors gzip even 5-byte bodies
        let encoder = BLIPFrameEncoder(dialect: vector.dialect, configuration: configuration)
        var output = ByteBuffer()
        let flags = BLIPFrameFlags(names: vector.flags)
        let type = BLIPMessageType(name: vector.type!)
        if type.isACK {
            try encoder.encodeACK(type, messageNumber: vector.number!, byteCount: vector.ackCount!, into: &output)
            #expect(output.hexString == vector.hex)
            return
        }
        // Message data from its meaning where the vector is a whole message, else the decoded payload.
        var data = ByteBuffer()
        if let properties = vector.properties, let text = vector.bodyText {
            let compressed = try encoder.writeMessageData(
                properties: BLIPProperties(properties.map { ($0[0], $0[1]) }),
                body: ByteBuffer(string: text),
                compressed: flags.contains(.compressed),
                into: &data
            )
            #expect(compressed == flags.contains(.compressed))
        } else {
            guard
                case .data(let frame) = try BLIPFrameDecoder(dialect: vector.dialect).decode(
                    ByteBuffer(hex: vector.hex)
                )
            else { throw BLIPWireError(.truncatedVarint) }
            data = frame.payload
        }
        let header = BLIPFrameHeader(messageNumber: vector.number!, type: type, flags: flags.subtracting(.moreComing))
        let encoded = try encoder.encodeFrame(
            header,
            data: &data,
            endOfMessage: !flags.contains(.moreComing),
            maximumFrameSize: 16_384,
            into: &output
        )
        #expect(output.hexString == vector.hex)
        #expect(encoded.header.flags == flags)
        #expect(data.readableBytes == 0)
    }
}
