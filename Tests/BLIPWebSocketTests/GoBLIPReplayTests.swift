import BLIP
import BLIPWebSocket
import BLIPWire
import Crypto
import Foundation
import NIOCore
import NIOWebSocket
import Testing

/// go-blip's client frames, replayed byte for byte over a real socket to our server; our replies must
/// decode to what go-blip's server replied.
@Suite("go-blip captures replayed to our server", .timeLimit(.minutes(2)))
struct GoBLIPReplayTests {
    struct Scenario: Sendable, CustomTestStringConvertible {
        var set: String
        var folder: String
        var clientFrames: [String]  // data frames only: our peer sends its own ACKs
        var expected: [[String: String]]  // per reply: id, type, properties (JSON), sha
        var testDescription: String { "\(self.set)/\(self.folder)" }
        var dialect: BLIPDialect { self.set == "go-blip" ? .blip3 : .blip2 }
        var subprotocol: String { self.set == "go-blip" ? "BLIP_3+CBMobile_3" : "BLIP" }

        static func load(_ set: String) -> [Scenario] {
            let manifest =
                try! JSONSerialization.jsonObject(
                    with: Data(contentsOf: fixturesRoot.appendingPathComponent("\(set)/manifest.json"))
                ) as! [String: Any]
            return (manifest["scenarios"] as! [[String: Any]]).map { scenario in
                let frames = (scenario["frames"] as! [[String: Any]]).compactMap { frame -> String? in
                    guard frame["direction"] as? String == "client->server", let file = frame["file"] as? String,
                        let blip = frame["blip"] as? [String: Any], !(blip["type"] as! String).hasPrefix("ACK")
                    else { return nil }
                    return file
                }
                let replies = (scenario["messages"] as! [[String: Any]])
                    .filter { $0["direction"] as? String == "server->client" }
                    .map { message -> [String: String] in
                        let properties = (message["properties"] as! [[String]]).map { "\($0[0])=\($0[1])" }
                        return [
                            "id": message["id"] as! String,
                            "properties": properties.joined(separator: "\n"),
                            "sha": message["body_sha256"] as! String,
                        ]
                    }
                return Scenario(set: set, folder: scenario["dir"] as! String, clientFrames: frames, expected: replies)
            }
        }

        static let all = load("go-blip") + load("go-blip-d3")
    }

    /// The go-blip test server's handlers: echo (compressed iff the request was), error from the request's
    /// Want-Error-* properties; anything else is 404.
    static func goBLIPRouter() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body, compressed: request.isCompressed)
        }
        router.register(profile: "error") { request, _ in
            throw BLIPError(
                domain: BLIPError.Domain(rawValue: request.properties["Want-Error-Domain"] ?? "BLIP"),
                code: BLIPError.Code(rawValue: Int32(request.properties["Want-Error-Code"] ?? "500") ?? 500),
                message: request.properties["Want-Error-Message"] ?? ""
            )
        }
        return router
    }

    @Test("each scenario's replies match go-blip's", arguments: Scenario.all)
    func replay(_ scenario: Scenario) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.subprotocols = [scenario.subprotocol]
        try await withServer(configuration, router: Self.goBLIPRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: [scenario.subprotocol])
            #expect(raw.subprotocol == scenario.subprotocol)
            let received = try await raw.channel.executeThenClose { inbound, outbound -> [[String: String]] in
                for file in scenario.clientFrames {
                    let bytes = try Data(
                        contentsOf: fixturesRoot.appendingPathComponent("\(scenario.set)/\(scenario.folder)/\(file)")
                    )
                    try await outbound.write(RawWebSocketClient.frame(.binary, ByteBuffer(bytes: bytes)))
                }
                // A ping after the last frame: its pong arrives once the server has read everything.
                try await outbound.write(RawWebSocketClient.frame(.ping, ByteBuffer(string: "sync")))
                let decoder = BLIPFrameDecoder(dialect: scenario.dialect)
                let acks = BLIPFrameEncoder(dialect: scenario.dialect)
                var readers: [UInt64: (BLIPMessageReader, BLIPFrameHeader, ByteBuffer, Int, Int)] = [:]
                var replies: [[String: String]] = []
                var synced = false
                for try await frame in inbound {
                    if frame.opcode == .pong { synced = true }
                    if synced && replies.count == scenario.expected.count { break }
                    guard frame.opcode == .binary, case .data(let data) = try decoder.decode(frame.data) else {
                        continue
                    }
                    let number = data.header.messageNumber
                    var (reader, first, body, received, acked) =
                        readers[number]
                        ?? (decoder.makeMessageReader(for: data.header), data.header, ByteBuffer(), 0, 0)
                    var piece = try reader.append(data.payload)
                    body.writeBuffer(&piece)
                    received += data.bodyLength
                    if data.header.flags.contains(.moreComing) {
                        if received - acked >= 50_000 {
                            var ack = ByteBuffer()
                            try acks.encodeACK(
                                .ackResponse,
                                messageNumber: number,
                                byteCount: UInt64(received),
                                into: &ack
                            )
                            try await outbound.write(RawWebSocketClient.frame(.binary, ack))
                            acked = received
                        }
                        readers[number] = (reader, first, body, received, acked)
                        continue
                    }
                    try reader.finish()
                    readers[number] = nil
                    var properties = reader.properties!.map { "\($0.name)=\($0.value)" }
                    if first.type == .error { properties.sort() }  // go-blip sorts its two error properties
                    replies.append([
                        "id": "\(first.type)#\(number)",
                        "properties": properties.joined(separator: "\n"),
                        "sha": SHA256.hash(data: Array(body.readableBytesView)).map { String(format: "%02x", $0) }
                            .joined(),
                        "compressed": first.flags.contains(.compressed) ? "yes" : "no",
                    ])
                    if synced && replies.count == scenario.expected.count { break }
                }
                return replies
            }
            #expect(received.count == scenario.expected.count, "replies: \(received.map { $0["id"]! })")
            for expected in scenario.expected {
                guard let reply = received.first(where: { $0["id"] == expected["id"] }) else {
                    Issue.record("no \(expected["id"]!) from our server")
                    continue
                }
                #expect(reply["properties"] == expected["properties"], "\(expected["id"]!)")
                // go-blip's 404 text differs from ours; every other body must match exactly.
                if !expected["properties"]!.contains("Error-Code=404") {
                    #expect(reply["sha"] == expected["sha"], "\(expected["id"]!) body")
                }
            }
        }
    }
}
