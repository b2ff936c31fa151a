import BLIPEngine
import BLIPWire
import NIOCore
import Testing

@testable import BLIP

/// In the seed and BLIP 2 dialects a large compressed body is gzipped by its sender before it takes the
/// connection's lock (ConnectionCore+Sending, `gzipAheadIfLarge`), for requests and replies alike; a small
/// one is left to the engine, under the lock. Either way the peer reads the body back whole.
@Suite("Large seed and BLIP 2 bodies are gzipped before the lock", .timeLimit(.minutes(1)))
struct GzipAheadOfLockTests {
    static let text = String(
        repeating: "{\"_id\":\"doc-17\",\"_rev\":\"3-a1\",\"channels\":[\"public\"]} ",
        count: 2_000
    )

    /// Bodies the engine was handed gzipped already, and bytes fed to compression, on one side.
    static func gzipFigures(_ connection: BLIPConnection) -> (ahead: Int, compressed: Int) {
        connection.core.state.withLockedValue { state in
            let statistics = state.engine.encoderStatistics
            return (statistics.bodiesGzippedAhead, statistics.bytesBeforeCompression)
        }
    }

    @Test(
        "a large compressed request and its reply are gzipped ahead; a small one is not",
        arguments: [BLIPDialect.blip2, .seed]
    )
    func largeBodiesGoAhead(dialect: BLIPDialect) async throws {
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body, compressed: true) }
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair(dialect: dialect)
        let server = BLIPConnection(transport: serverTransport, router: router)
        let serving = Task { await server.run() }
        let large = ByteBuffer(string: Self.text)
        #expect(large.readableBytes >= ConnectionCore.gzipAheadMinimumBody)
        try await withBLIPConnection(over: clientTransport) { client in
            let reply = try await client.sendRequest(BLIPRequest(profile: "echo", body: large, compressed: true))
            #expect(reply.body == large)
            #expect(Self.gzipFigures(client) == (1, large.readableBytes))
            #expect(Self.gzipFigures(server) == (1, large.readableBytes))
            let small = ByteBuffer(string: String(Self.text.prefix(2_000)))
            let smallReply = try await client.sendRequest(BLIPRequest(profile: "echo", body: small, compressed: true))
            #expect(smallReply.body == small)
            #expect(Self.gzipFigures(client) == (1, large.readableBytes + small.readableBytes))
            #expect(Self.gzipFigures(server) == (1, large.readableBytes + small.readableBytes))
            // Compressed on the wire: the statistics count what gzip made of it.
            #expect(client.statistics.bytesAfterCompression < client.statistics.bytesBeforeCompression / 10)
        }
        await server.close()
        _ = await serving.value
    }

    @Test("BLIP 3 compresses frame by frame in send order: never ahead")
    func blip3NeverAhead() async throws {
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body, compressed: true) }
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverTransport, router: router)
        let serving = Task { await server.run() }
        let large = ByteBuffer(string: Self.text)
        try await withBLIPConnection(over: clientTransport) { client in
            let reply = try await client.sendRequest(BLIPRequest(profile: "echo", body: large, compressed: true))
            #expect(reply.body == large)
            #expect(Self.gzipFigures(client).ahead == 0 && Self.gzipFigures(server).ahead == 0)
            #expect(Self.gzipFigures(client).compressed >= large.readableBytes)
        }
        await server.close()
        _ = await serving.value
    }
}
