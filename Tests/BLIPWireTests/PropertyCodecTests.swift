import BLIPWire
import NIOCore
import PropertyBased
import Testing

struct PropertyVector: Sendable, CustomTestStringConvertible {
    var name: String
    var dialect: BLIPDialect
    var hex: String
    var properties: [[String]]?
    var error: String?
    var maximumSize: Int?
    var testDescription: String { "\(self.name) (\(self.dialect))" }

    static let all: [PropertyVector] = {
        let json = try! Fixtures.json("vectors/properties.json")
        return (json["cases"] as! [[String: Any]]).flatMap { item in
            (item["dialects"] as! [String]).map { dialect in
                PropertyVector(
                    name: item["name"] as! String,
                    dialect: BLIPDialect(rawValue: dialect)!,
                    hex: item["hex"] as! String,
                    properties: propertyPairs(item["properties"]),
                    error: item["error"] as? String,
                    maximumSize: item["maximumSize"] as? Int
                )
            }
        }
    }()
}

@Suite("Property blocks")
struct PropertyCodecTests {
    @Test("digest 10.2 vectors and the rejection cases", arguments: PropertyVector.all)
    func vector(_ vector: PropertyVector) throws {
        var input = ByteBuffer(hex: vector.hex)
        let limit = vector.maximumSize ?? BLIPPropertyCodec.defaultMaximumSize
        if let expected = vector.properties {
            let decoded = try BLIPPropertyCodec.read(from: &input, dialect: vector.dialect, maximumSize: limit)
            #expect(pairs(decoded) == expected)
            #expect(input.readableBytes == 0)
            // Our encoder writes the same bytes back, tokens included.
            var output = ByteBuffer()
            try BLIPPropertyCodec.write(decoded, dialect: vector.dialect, to: &output)
            #expect(output.hexString == vector.hex)
        } else {
            let error = #expect(throws: BLIPWireError.self) {
                try BLIPPropertyCodec.read(from: &input, dialect: vector.dialect, maximumSize: limit)
            }
            #expect(error?.code.caseName == vector.error)
        }
    }

    @Test("the length prefix is written even when there are no properties", arguments: BLIPDialect.allCases)
    func emptyBlock(dialect: BLIPDialect) throws {
        var output = ByteBuffer()
        #expect(try BLIPPropertyCodec.write([:], dialect: dialect, to: &output) == 1)
        #expect(output.hexString == "00")
    }

    @Test("every token of the table in keys and values, seed and BLIP 2")
    func allTokens() throws {
        let strings = [
            "Profile", "Error-Code", "Error-Domain", "Content-Type", "application/json",
            "application/octet-stream", "text/plain; charset=UTF-8", "text/xml", "Accept", "Cache-Control",
            "must-revalidate", "If-Match", "If-None-Match", "Location",
        ]
        var properties = BLIPProperties()
        for (index, string) in strings.enumerated() { properties[string] = strings[(index + 1) % strings.count] }
        for dialect in [BLIPDialect.blip2, .seed] {
            var output = ByteBuffer()
            try BLIPPropertyCodec.write(properties, dialect: dialect, to: &output)
            #expect(output.readableBytes == 1 + strings.count * 4, "every string is a 2-byte token")
            #expect(try BLIPPropertyCodec.read(from: &output, dialect: dialect) == properties)
        }
        var plain = ByteBuffer()
        try BLIPPropertyCodec.write(properties, dialect: .blip3, to: &plain)
        #expect(plain.readableBytes > 1 + strings.count * 4, "BLIP 3 writes no tokens")
        // Matching is exact and case-sensitive.
        var lower = ByteBuffer()
        try BLIPPropertyCodec.write(["profile": "x"], dialect: .blip2, to: &lower)
        #expect(lower.hexString == "0A 70 72 6F 66 69 6C 65 00 78 00")
    }

    @Test("strings that cannot be sent are refused with a typed error")
    func unsendable() {
        var output = ByteBuffer()
        #expect(throws: BLIPWireError(.propertyStringContainsNUL("a\u{0}b"))) {
            try BLIPPropertyCodec.write(["k": "a\u{0}b"], dialect: .blip3, to: &output)
        }
        #expect(throws: BLIPWireError(.emptyPropertyString)) {
            try BLIPPropertyCodec.write(["k": ""], dialect: .seed, to: &output)
        }
        #expect(throws: BLIPWireError(.propertyStringLooksLikeToken("\u{1}"))) {
            try BLIPPropertyCodec.write(["k": "\u{1}"], dialect: .blip2, to: &output)
        }
        // The same one-byte string is fine where there are no tokens.
        #expect(throws: Never.self) { try BLIPPropertyCodec.write(["k": "\u{1}"], dialect: .blip3, to: &output) }
        #expect(throws: Never.self) { try BLIPPropertyCodec.write(["k": ""], dialect: .blip2, to: &output) }
    }

    @Test("blocks over the limit: refused on output and on input, before the data is read")
    func limit() throws {
        let big: BLIPProperties = ["X-Big": String(repeating: "x", count: 102_400)]
        var output = ByteBuffer()
        #expect(throws: BLIPWireError(.propertiesTooLarge(length: 102_407, limit: 102_400))) {
            try BLIPPropertyCodec.write(big, dialect: .blip3, to: &output)
        }
        #expect(output.readableBytes == 0, "nothing is written for a refused block")
        try BLIPPropertyCodec.write(big, dialect: .blip3, maximumSize: 200_000, to: &output)
        #expect(throws: BLIPWireError(.propertiesTooLarge(length: 102_407, limit: 102_400), offset: 0)) {
            try BLIPPropertyCodec.read(from: &output, dialect: .blip3)
        }
        // A huge declared length is refused from the prefix alone.
        var declared = ByteBuffer()
        declared.writeBLIPVarint(UInt64(1) << 40)
        #expect(throws: BLIPWireError(.propertiesTooLarge(length: UInt64(1) << 40, limit: 102_400), offset: 0)) {
            try BLIPPropertyCodec.read(from: &declared, dialect: .blip3)
        }
    }

    @Test("a block of many tiny properties decodes in linear time")
    func manySmallProperties() throws {
        let properties = BLIPProperties((0..<12_000).map { ("\($0)", "") })
        var output = ByteBuffer()
        try BLIPPropertyCodec.write(properties, dialect: .blip3, to: &output)
        #expect(try BLIPPropertyCodec.read(from: &output, dialect: .blip3).count == 12_000)
        // Duplicates deep in a long block are still found.
        var duplicate = ByteBuffer()
        let repeated = BLIPProperties((0..<12_000).map { ("\($0)", "") })
        try BLIPPropertyCodec.write(repeated, dialect: .blip3, to: &duplicate)
        duplicate.writeString("7\u{0}\u{0}")
        var prefix = ByteBuffer()
        prefix.writeBLIPVarint(UInt64(duplicate.readableBytes - 3))  // the block grew by 3 bytes
        try #require(prefix.readableBytes == 3)
        duplicate.setBuffer(prefix, at: 0)
        #expect(throws: BLIPWireError(.duplicatePropertyName("7"), offset: duplicate.readableBytes - 3)) {
            try BLIPPropertyCodec.read(from: &duplicate, dialect: .blip3)
        }
    }

    @Test("errors say where: the offset of the bad string within the block")
    func errorOffsets() {
        // varint 0x08, then "ab\0" then "\xFF\0" (invalid UTF-8 at block byte 3 = buffer byte 4), "c\0"
        var input = ByteBuffer(hex: "07 61 62 00 FF 00 63 00")
        #expect(throws: BLIPWireError(.invalidUTF8, offset: 4)) {
            try BLIPPropertyCodec.read(from: &input, dialect: .blip3)
        }
    }

    @Test(
        "every kind of invalid UTF-8 in a property is refused",
        arguments: [
            "C0 AF",  // overlong "/"
            "E0 80 AF",  // overlong, three bytes
            "ED A0 80",  // a UTF-16 surrogate
            "F4 90 80 80",  // beyond U+10FFFF
            "E2 82",  // truncated before the NUL
            "80",  // a lone continuation byte
            "61 FE 62",  // a byte that never occurs
        ]
    )
    func invalidUTF8Forms(bad: String) {
        // "ab\0", then the bad string and its NUL: the bad string starts at block byte 3.
        let body = ByteBuffer(hex: "61 62 00 " + bad + " 00")
        var input = ByteBuffer()
        input.writeBLIPVarint(UInt64(body.readableBytes))
        input.writeImmutableBuffer(body)
        #expect(throws: BLIPWireError(.invalidUTF8, offset: 4)) {
            try BLIPPropertyCodec.read(from: &input, dialect: .blip3)
        }
    }

    @Test("random properties round-trip in every dialect")
    func roundTrip() async {
        let text = Gen<String>.oneOf(
            Gen<Character>.letterOrNumber.string(of: 0...12),
            Gen<UnicodeScalar>.unicodeScalar(in: "\u{1}"..."\u{2FFF}").map { Character($0) }.string(of: 1...8),
            Gen.always("Profile"),
            Gen.always("application/json")
        )
        let generator = zip(text, text).array(of: 0...12)
        await propertyCheck(count: 300, input: generator) { list throws in
            let properties = BLIPProperties(list.filter { !$0.0.utf8.contains(0) && !$0.1.utf8.contains(0) })
            for dialect in BLIPDialect.allCases {
                var buffer = ByteBuffer()
                do {
                    try BLIPPropertyCodec.write(properties, dialect: dialect, to: &buffer)
                } catch {
                    // Only strings a tokenized dialect cannot carry may be refused.
                    #expect(dialect != .blip3, "\(error)")
                    continue
                }
                #expect(try BLIPPropertyCodec.read(from: &buffer, dialect: dialect) == properties)
            }
        }
    }
}

@Suite("BLIPProperties")
struct BLIPPropertiesTests {
    @Test("insertion order is kept; setting an existing name replaces in place; nil removes")
    func order() {
        var properties: BLIPProperties = ["b": "1", "a": "2"]
        properties["c"] = "3"
        properties["b"] = "4"
        #expect(pairs(properties) == [["b", "4"], ["a", "2"], ["c", "3"]])
        properties["a"] = nil
        #expect(pairs(properties) == [["b", "4"], ["c", "3"]])
        properties.profile = "echo"
        #expect(properties["Profile"] == "echo")
        #expect(BLIPProperties([("x", "1"), ("x", "2")]).map(\.value) == ["2"])
    }
}
