import BLIPWire
import NIOCore
import PropertyBased
import Testing

struct VarintVector: Sendable, CustomTestStringConvertible {
    var value: UInt64?
    var hex: String
    var minimal: Bool
    var reason: String?
    var testDescription: String { "\(self.hex.isEmpty ? "(empty)" : self.hex)" }

    static let all: [VarintVector] = {
        let json = try! Fixtures.json("vectors/varints.json")
        let valid = (json["valid"] as! [[String: Any]]).map {
            VarintVector(
                value: UInt64($0["value"] as! String)!,
                hex: $0["hex"] as! String,
                minimal: $0["minimal"] as! Bool
            )
        }
        let invalid = (json["invalid"] as! [[String: Any]]).map {
            VarintVector(value: nil, hex: $0["hex"] as! String, minimal: false, reason: $0["reason"] as? String)
        }
        return valid + invalid
    }()
}

@Suite("Varints")
struct VarintTests {
    @Test("digest 10.1 vectors and the invalid cases", arguments: VarintVector.all)
    func vector(_ vector: VarintVector) throws {
        var input = ByteBuffer(hex: vector.hex)
        if let value = vector.value {
            #expect(try input.readBLIPVarint() == value)
            #expect(input.readableBytes == 0)
            if vector.minimal {
                var output = ByteBuffer()
                #expect(output.writeBLIPVarint(value) == BLIPVarint.encodedLength(of: value))
                #expect(output.hexString == vector.hex)
            }
        } else {
            let before = input.readerIndex
            let error = #expect(throws: BLIPWireError.self) { try input.readBLIPVarint() }
            #expect(error?.code.caseName == vector.reason)
            #expect(error?.offset == 0)
            #expect(input.readerIndex == before, "a failed read must not consume input")
        }
    }

    @Test("minimal lengths at every 7-bit boundary")
    func lengths() {
        #expect(BLIPVarint.encodedLength(of: 0) == 1)
        for bytes in 1...9 {
            let largest = (UInt64(1) << UInt64(7 * bytes)) - 1
            #expect(BLIPVarint.encodedLength(of: largest) == bytes)
            #expect(BLIPVarint.encodedLength(of: largest + 1) == bytes + 1)
        }
        #expect(BLIPVarint.encodedLength(of: .max) == 10)
    }

    @Test("round trip of random 64-bit values, with trailing bytes left alone")
    func roundTrip() async {
        await propertyCheck(count: 2000, input: Gen.uint64()) { value throws in
            var buffer = ByteBuffer()
            let written = buffer.writeBLIPVarint(value)
            buffer.writeInteger(UInt8(0xAB))
            #expect(written == BLIPVarint.encodedLength(of: value))
            #expect(try buffer.readBLIPVarint() == value)
            #expect(buffer.readableBytes == 1)
        }
    }

    @Test("every truncation of a long varint is rejected")
    func truncations() throws {
        var full = ByteBuffer()
        full.writeBLIPVarint(UInt64.max)
        for length in 0..<full.readableBytes {
            var prefix = full.getSlice(at: 0, length: length)!
            #expect(throws: BLIPWireError(.truncatedVarint, offset: 0)) { try prefix.readBLIPVarint() }
        }
    }
}
