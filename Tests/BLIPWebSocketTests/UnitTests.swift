import BLIPWebSocket
import BLIPWire
import Foundation
import NIOCore
import NIOWebSocket
import Testing

@Suite("Subprotocols, URLs and masking")
struct UnitTests {
    static var negotiation: [String: Any] {
        try! JSONSerialization.jsonObject(
            with: Data(contentsOf: fixturesRoot.appendingPathComponent("subprotocols/negotiation.json"))
        ) as! [String: Any]
    }

    @Test("digest 10.9: the server picks the client's first offer it supports")
    func negotiationVectors() {
        for vector in Self.negotiation["negotiation"] as! [[String: Any]] {
            let chosen = BLIPSubprotocol.choose(
                offered: vector["client"] as! [String],
                supported: vector["server"] as! [String]
            )
            #expect(chosen == vector["result"] as? String, "\(vector)")
        }
    }

    @Test("digest 10.9: header values split on commas, trimmed; repeated header lines merge")
    func headerParsing() {
        for vector in Self.negotiation["headerParsing"] as! [[String: Any]] {
            let offers = BLIPSubprotocol.parseOffers([vector["header"] as! String])
            #expect(offers.contains(vector["protocol"] as! String) == vector["includes"] as! Bool, "\(vector)")
        }
        #expect(BLIPSubprotocol.parseOffers(["chat", "BLIP"]) == ["chat", "BLIP"])
    }

    @Test("subprotocols choose the dialect; alpha and malformed names choose none")
    func dialects() {
        for vector in Self.negotiation["dialects"] as! [[String: Any]] {
            let expected = (vector["dialect"] as? String).flatMap(BLIPDialect.init(rawValue:))
            #expect(BLIPSubprotocol.dialect(for: vector["subprotocol"] as! String) == expected, "\(vector)")
        }
    }

    @Test(
        "ws and wss URLs",
        arguments: [
            ("ws://127.0.0.1:4985/db/_blipsync", false, "127.0.0.1", 4985, "/db/_blipsync"),
            ("wss://example.com/", true, "example.com", 443, "/"),
            ("ws://example.com", false, "example.com", 80, "/"),
            ("ws://[::1]:9000/x?y=1", false, "::1", 9000, "/x?y=1"),
            ("ws://user:pass@host:1/p", false, "host", 1, "/p"),
            ("WS://host?q", false, "host", 80, "/?q"),
        ] as [(String, Bool, String, Int, String)]
    )
    func urls(string: String, secure: Bool, host: String, port: Int, target: String) throws {
        let url = try #require(BLIPWebSocketURL(string))
        #expect(url.isSecure == secure && url.host == host && url.port == port && url.target == target)
    }

    @Test(
        "bad URLs are refused",
        arguments: ["http://x/", "ws://", "ws://host:0/", "ws://host:99999/", "ws://[::1/x", "ws://host:abc/"]
    )
    func badURLs(string: String) {
        #expect(BLIPWebSocketURL(string) == nil)
    }

    @Test("word-wide masking equals NIO's byte-wise masking at every length and key offset")
    func masking() {
        var random = SystemRandomNumberGenerator()
        for length in [0, 1, 3, 7, 8, 9, 15, 16, 17, 100, 1000, 16_384] {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            for offset in 0..<4 {
                let key: WebSocketMaskingKey = [0x12, 0x34, 0xAB, 0xCD]
                var expected = ByteBuffer(bytes: bytes)
                expected.webSocketMask(key, indexOffset: offset)
                var ours = ByteBuffer(bytes: bytes)
                ours.webSocketMaskWordWide((0x12, 0x34, 0xAB, 0xCD), keyOffset: offset)
                #expect(ours == expected, "length \(length) offset \(offset)")
            }
        }
    }
}

let fixturesRoot: URL = {
    var url = URL(fileURLWithPath: #filePath)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
            return url.appendingPathComponent("Fixtures")
        }
    }
    fatalError("no Package.swift above \(#filePath)")
}()
