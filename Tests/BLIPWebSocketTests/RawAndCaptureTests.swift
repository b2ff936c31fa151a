import BLIP
import BLIPWebSocket
import BLIPWire
import Foundation
import NIOCore
import Testing

@Suite("Raw endpoint and frame capture", .timeLimit(.minutes(3)))
struct RawAndCaptureTests {
    @Test("the raw endpoint echoes binary and text, counts sink:N, produces source:N")
    func rawEndpoint() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.rawEndpoint = .forSubprotocol(BLIPRawWebSocket.benchmarkSubprotocol)
        try await withServer(configuration) { server in
            let raw = try await BLIPRawWebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            #expect(raw.subprotocol == BLIPRawWebSocket.benchmarkSubprotocol)
            raw.send(ByteBuffer(string: "binary"))
            var reply = try await raw.receive()
            #expect(reply.map { String(buffer: $0.message) } == "binary" && reply?.isText == false)
            raw.send(ByteBuffer(string: "héllo"), text: true)
            reply = try await raw.receive()
            #expect(reply.map { String(buffer: $0.message) } == "héllo" && reply?.isText == true)
            raw.send(ByteBuffer(string: "sink:100000"), text: true)
            for _ in 0..<10 { raw.send(ByteBuffer(repeating: 1, count: 10_000)) }
            reply = try await raw.receive()
            #expect(reply.map { String(buffer: $0.message) } == "100000")
            raw.send(ByteBuffer(string: "source:40000"), text: true)
            var received = 0
            while let (message, isText) = try await raw.receive(), !isText { received += message.readableBytes }
            #expect(received == 40_000)
            // BLIP clients still get BLIP on the same server.
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
            // Text that is not UTF-8 closes the connection (1007).
            raw.send(ByteBuffer(bytes: [0xC0, 0x80]), text: true)
            await #expect(throws: BLIPConnectionError.self) { _ = try await raw.receive() }
        }
    }

    @Test("measureEchoes (the handler-style baseline) times every echo, in flight as asked; a close fails it")
    func measuredEchoes() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.rawEndpoint = .forSubprotocol(BLIPRawWebSocket.benchmarkSubprotocol)
        try await withServer(configuration) { server in
            let raw = try await BLIPRawWebSocket.connect(to: "ws://127.0.0.1:\(server.port)/")
            let latencies = try await raw.measureEchoes(of: pattern(100), count: 1_000, inFlight: 16)
            #expect(latencies.count == 1_000)
            #expect(latencies.allSatisfy { $0 > .zero && $0 < .seconds(60) })
            // A second run on the same connection, then the ordinary API again: nothing was left behind.
            #expect(try await raw.measureEchoes(of: pattern(10), count: 5, inFlight: 64).count == 5)
            raw.send(ByteBuffer(string: "after"))
            #expect(try await raw.receive().map { String(buffer: $0.message) } == "after")
            raw.close()
            await raw.waitUntilClosed()
            await #expect(throws: BLIPConnectionError.self) {
                _ = try await raw.measureEchoes(of: pattern(10), count: 5, inFlight: 1)
            }
        }
    }

    @Test("in echo mode (serve --echo-only) the benchmark commands are echoed like any text; any subprotocol")
    func pureEchoMode() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.rawEndpoint = .always
        configuration.rawEndpointMode = .echo
        try await withServer(configuration) { server in
            let raw = try await BLIPRawWebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", subprotocols: [])
            for command in ["sink:10", "source:10", "sink:0"] {
                raw.send(ByteBuffer(string: command), text: true)
                let reply = try await raw.receive()
                #expect(reply.map { String(buffer: $0.message) } == command && reply?.isText == true)
            }
            raw.send(ByteBuffer(bytes: [0, 1, 2]))
            let reply = try await raw.receive()
            #expect(reply?.message == ByteBuffer(bytes: [0, 1, 2]) && reply?.isText == false)
            // Regression (Autobahn 1.1.1, 1.2.1, 9.7.1, 9.8.1): an empty message was echoed but not flushed.
            for isText in [true, false] {
                raw.send(ByteBuffer(), text: isText)
                let empty = try await raw.receive()
                #expect(empty?.message.readableBytes == 0 && empty?.isText == isText)
            }
            raw.close()
        }
    }

    @Test("--capture writes every frame of a connection in the fixtures format, decodable per direction")
    func capture() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "blip-capture-\(UUID().uuidString)"
        )
        defer { try? FileManager.default.removeItem(at: directory) }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.captureDirectory = directory.path
        try await withServer(configuration) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "one"))
                _ = try await connection.sendRequest(
                    BLIPRequest(profile: "echo", body: ByteBuffer(repeating: 3, count: 200_000))
                )
                await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "none")) }
            }
        }
        let folder = directory.appendingPathComponent("connection-001")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(files.first == "f000-c2s-MSG1.bin")
        #expect(files.contains { $0.hasSuffix("-s2c-ERR3.bin") })
        #expect(files.contains { $0.contains("-s2c-ACK_MSG2") } || files.contains { $0.contains("-c2s-ACK_RPY2") })
        for direction in ["c2s", "s2c"] {
            let decoder = BLIPFrameDecoder(dialect: .blip3)
            for file in files where file.contains("-\(direction)-") {
                let bytes = try Data(contentsOf: folder.appendingPathComponent(file))
                _ = try decoder.decode(ByteBuffer(bytes: bytes))  // CRCs and order hold across the files
            }
        }
    }
}
