import BLIP
import BLIPWebSocket
import BLIPWire
import NIOCore
import NIOWebSocket
import Testing

/// A body produced in chunks, as an AsyncSequence.
struct ChunkedBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let total: Int
    let chunk: Int

    func makeAsyncIterator() -> Iterator { Iterator(remaining: self.total, chunk: self.chunk) }

    struct Iterator: AsyncIteratorProtocol {
        var remaining: Int
        let chunk: Int

        mutating func next() async throws -> ByteBuffer? {
            guard self.remaining > 0 else { return nil }
            let size = Swift.min(self.chunk, self.remaining)
            self.remaining -= size
            return ByteBuffer(repeating: UInt8(truncatingIfNeeded: self.remaining), count: size)
        }
    }
}

@Suite("Streaming and limits over WebSocket", .timeLimit(.minutes(2)))
struct StreamingOverSocketTests {
    /// Bodies are checked by length and by each chunk's first and last bytes (per-byte sums are slow in a
    /// debug build); the codec tests check content byte for byte.
    @Test(
        "an 8 MiB body streamed up and another streamed down",
        arguments: [
            (["BLIP_3+CBMobile_3"], BLIPDialect.blip3, false),
            (["BLIP"], .blip2, false),
            ([], .seed, true),
        ] as [([String], BLIPDialect, Bool)]
    )
    func largeStreams(offered: [String], dialect: BLIPDialect, seed: Bool) async throws {
        var router = standardRouter()
        router.registerStreaming(profile: "upload") { request, _ in
            var total = 0
            var sum: UInt64 = 0
            for try await piece in request.body {
                total += piece.readableBytes
                sum =
                    sum &* 31 &+ UInt64(piece.readableBytesView.first ?? 0) &+ UInt64(piece.readableBytesView.last ?? 0)
            }
            return BLIPResponse(properties: ["Count": "\(total)", "Sum": "\(sum)"])
        }
        router.register(profile: "download") { _, _ in BLIPResponse(body: ByteBuffer(repeating: 7, count: 8 << 20)) }
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.acceptsSeedDialect = seed
        try await withServer(serverConfiguration, router: router) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = offered
            configuration.usesSeedDialect = seed
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration) {
                connection in
                #expect(connection.dialect == dialect)
                let body = ChunkedBody(total: 8 << 20, chunk: 65_536)
                let reply = try await connection.sendRequest(BLIPRequest(profile: "upload"), body: body)
                #expect(reply.properties["Count"] == "\(8 << 20)")
                #expect(reply.properties["Sum"] != nil)

                let download = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "download"))
                var received = 0
                for try await piece in download.body {
                    #expect(piece.readableBytesView.first == 7 && piece.readableBytesView.last == 7)
                    received += piece.readableBytes
                }
                #expect(received == 8 << 20)
            }
        }
    }

    @Test("a WebSocket message above the maximum closes with 1009")
    func messageTooBig() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.maximumMessageSize = 64 * 1024
        try await withServer(configuration) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let code = try await raw.channel.executeThenClose { inbound, outbound -> UInt16? in
                try await outbound.write(RawWebSocketClient.frame(.binary, ByteBuffer(repeating: 1, count: 100_000)))
                for try await frame in inbound where frame.opcode == .connectionClose {
                    var data = frame.data
                    return data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
                }
                return nil
            }
            #expect(code == 1009)
        }
    }
}
