import BLIP
import BLIPWebSocket
import Foundation
import Testing

/// `Data` bodies and a `URL` to connect to, for code that already works in Foundation's types.
@Suite("Data bodies and URL endpoints", .timeLimit(.minutes(1)))
struct DataBodyTests {
    @Test("a Data request and reply over a connection made from a URL")
    func dataBothWays() async throws {
        var router = BLIPRouter()
        router.register(profile: "reverse") { request, _ in
            BLIPResponse(data: Data(request.data.reversed()))
        }
        let bytes = Data((0..<300).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try await TypedBodyTests.withServer(router: router) { port in
            let url = try #require(URL(string: "ws://127.0.0.1:\(port)/db/_blipsync"))
            try await BLIPWebSocketClient.connect(to: url) { connection in
                let reply = try await connection.sendRequest(BLIPRequest(profile: "reverse", data: bytes))
                #expect(reply.data == Data(bytes.reversed()))
                #expect(reply.body.readableBytes == 300)
            }
        }
    }

    @Test("a JSON body made with the caller's own encoder and decoded with its own decoder")
    func ownCoders() throws {
        struct Stamp: Codable, Equatable { var at: Date }
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let stamp = Stamp(at: Date(timeIntervalSince1970: 1_700_000_000))
        let request = try BLIPRequest(profile: "stamp", json: stamp, using: encoder)
        #expect(request.text == #"{"at":"2023-11-14T22:13:20Z"}"#)
        #expect(try request.decode(Stamp.self, using: decoder) == stamp)
        let reply = try BLIPResponse(json: ["a": 1])
        #expect(reply.text == #"{"a":1}"#)
    }
}
