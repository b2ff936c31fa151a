import BLIP
import BLIPTestSupport
import BLIPWebSocket
import BLIPWire
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOWebSocket
import Synchronization
import Testing

@Suite("WebSocket transport over loopback", .timeLimit(.minutes(2)))
struct LoopbackTests {
    @Test(
        "requests and replies in each dialect; the subprotocol picks it",
        arguments: [
            (["BLIP_3+CBMobile_3"], BLIPDialect.blip3, false),
            (["BLIP"], .blip2, false),
            ([], .seed, true),
        ] as [([String], BLIPDialect, Bool)]
    )
    func dialects(offered: [String], dialect: BLIPDialect, seed: Bool) async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.acceptsSeedDialect = seed
        try await withServer(serverConfiguration) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = offered
            configuration.usesSeedDialect = seed
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/db/_blipsync",
                configuration: configuration
            ) {
                connection in
                #expect(connection.dialect == dialect)
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "echo", properties: ["X": "1"], text: "hi")
                )
                #expect(String(buffer: reply.body) == "hi" && reply.properties["X"] == "1")
                let big = pattern(3 << 20)
                let echoed = try await connection.sendRequest(BLIPRequest(profile: "echo", body: big, compressed: true))
                #expect(echoed.body == big)
                await #expect(throws: BLIPError(domain: .http, code: 409)) {
                    try await connection.sendRequest(BLIPRequest(profile: "error"))
                }
            }
        }
    }

    @Test("the server takes the client's first offer it speaks; with none it answers HTTP 500 naming its protocols")
    func negotiation() async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.subprotocols = ["BLIP_3+CBMobile_2", "BLIP_3+CBMobile_3"]
        try await withServer(serverConfiguration) { server in
            let raw = try await RawWebSocketClient.connect(
                port: server.port,
                subprotocols: ["BLIP_3+CBMobile_4", "BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"]
            )
            #expect(raw.subprotocol == "BLIP_3+CBMobile_3", "the client's order wins")
            try await raw.channel.executeThenClose { _, _ in }

            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = ["BLIP_3+Other"]
            let error = await #expect(throws: BLIPHandshakeError.self) {
                try await BLIPWebSocketClient.connect(
                    to: "ws://127.0.0.1:\(server.port)/",
                    configuration: configuration
                ) { _ in }
            }
            #expect(error?.code == .subprotocolRefused && error?.status == 500)
            #expect(error?.isTransient == false)
            #expect(
                error?.bodyText.contains("BLIP_3+CBMobile_2, BLIP_3+CBMobile_3") == true,
                "\(String(describing: error))"
            )
        }
    }

    @Test("a path, when configured, must match; otherwise any path is served")
    func paths() async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.path = "/db/_blipsync"
        try await withServer(serverConfiguration) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/db/_blipsync?x=1") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
            let error = await #expect(throws: BLIPHandshakeError.self) {
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/other") { _ in }
            }
            #expect(error?.code == .notFound && error?.status == 404)
        }
        try await withServer { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/any/path/at/all") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
        }
    }

    @Test(
        "a 101 without one of the client's offers fails with a subprotocol error",
        arguments: [nil, "BLIP_3+Unoffered"]
    )
    func wrongSubprotocol(answer: String?) async throws {
        let server = try await RawWebSocketServer { _ in answer }
        let error = await #expect(throws: BLIPHandshakeError.self) {
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { _ in }
        }
        #expect(error?.code == .subprotocolRefused && error?.status == 101, "\(String(describing: error))")
        await server.close()
    }

    @Test("extra request headers reach the server; Host carries the port")
    func headers() async throws {
        let seen = NIOLockedValueBox<[String: String]>([:])
        let server = try await RawWebSocketServer { offered in
            seen.withLockedValue { $0["offered"] = offered.joined(separator: "|") }
            return offered.first
        }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.headers = ["Authorization": "Basic dXNlcjpwYXNz", "Cookie": "SyncGatewaySession=abc"]
        configuration.heartbeatInterval = nil
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/db",
            configuration: configuration
        )
        #expect(transport.subprotocol == "BLIP_3+CBMobile_3")
        #expect(seen.withLockedValue { $0["offered"] } == "BLIP_3+CBMobile_3|BLIP_3+CBMobile_2")
        transport.close(.normal)
        await server.close()
    }

    @Test(
        "wss with a trusted self-signed certificate, with a pin, and refused with a wrong pin",
        .enabled(if: TestCertificate.isAvailable, "needs the openssl command")
    )
    func tls() async throws {
        let certificate = try await offThePool { try TestCertificate.make() }
        defer { certificate.remove() }
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.tls = certificate.serverTLS
        try await withServer(serverConfiguration) { server in
            var trusted = BLIPWebSocketClient.Configuration()
            trusted.tls.trustRoots = .pemFile(certificate.certificatePath)
            try await BLIPWebSocketClient.connect(to: "wss://localhost:\(server.port)/", configuration: trusted) {
                connection in
                let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(200_000)))
                #expect(reply.body == pattern(200_000))
            }
            // The same over an IP address (no SNI; the certificate's IP SAN is checked).
            try await BLIPWebSocketClient.connect(to: "wss://127.0.0.1:\(server.port)/", configuration: trusted) {
                connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
            let pem = try String(contentsOfFile: certificate.certificatePath, encoding: .utf8)
            let der = try NIOSSLPemToDER(pem)
            var pinned = BLIPWebSocketClient.Configuration()
            pinned.tls.pinnedCertificateSHA256 = Array(SHA256.hash(data: der))
            try await BLIPWebSocketClient.connect(to: "wss://127.0.0.1:\(server.port)/", configuration: pinned) {
                connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
            var wrong = BLIPWebSocketClient.Configuration()
            wrong.tls.pinnedCertificateSHA256 = [UInt8](repeating: 0, count: 32)
            await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "wss://127.0.0.1:\(server.port)/", configuration: wrong) {
                    _ in
                }
            }
            // Untrusted by default (system roots).
            await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "wss://localhost:\(server.port)/") { _ in }
            }
        }
    }

    /// Also a regression test: with no ACKs and no reads, only the socket turning writable again wakes the
    /// writer; that wake-up used to arrive inside the writer's own flush and be lost, stalling at 64 KiB.
    @Test("frames on the wire are at most 16 KiB, and writing resumes when the socket drains")
    func frameSizes() async throws {
        let server = try await RawWebSocketServer { $0.first }
        async let accepted = server.accept()
        let transport = try await BLIPWebSocketClient.openTransport(to: "ws://127.0.0.1:\(server.port)/")
        let peer = try await accepted
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        let upload = Task { try await connection.sendRequest(BLIPRequest(profile: "sink", body: pattern(1 << 20))) }
        // Without ACKs the client stops at its window: read the frames up to there.
        let sizes = try await peer.executeThenClose { inbound, _ -> [Int] in
            var sizes: [Int] = []
            for try await frame in inbound where frame.opcode == .binary {
                sizes.append(frame.length)
                if sizes.reduce(0, +) >= 120_000 { break }
            }
            return sizes
        }

        #expect(sizes.count >= 7 && sizes.allSatisfy { $0 <= 16_384 } && sizes.max() == 16_384, "\(sizes)")
        await #expect(throws: BLIPConnectionError.self) { try await upload.value }
        _ = await running.value
        await server.close()
    }

    /// The server counts the bytes of a 16 MiB upload as its streaming handler reads them; each urgent
    /// probe reports that count. Urgent requests overtake the transfer when they are answered while it
    /// is still arriving.
    @Test("urgent requests overtake a 16 MiB transfer on the same connection")
    func urgentDuringBulk() async throws {
        let uploaded = NIOLockedValueBox(0)
        let total = 16 << 20
        var router = standardRouter()
        router.registerStreaming(profile: "upload") { request, _ in
            for try await piece in request.body { uploaded.withLockedValue { $0 += piece.readableBytes } }
            return BLIPResponse()
        }
        router.register(profile: "probe") { _, _ in BLIPResponse(text: "\(uploaded.withLockedValue { $0 })") }
        try await withServer(router: router) { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                let bulk = Task {
                    try await connection.sendRequest(BLIPRequest(profile: "upload", body: pattern(total)))
                }
                var seen: [Int] = []
                for _ in 0..<20 {
                    let reply = try await connection.sendRequest(BLIPRequest(profile: "probe", urgent: true))
                    seen.append(Int(String(buffer: reply.body)) ?? -1)
                }
                _ = try await bulk.value
                #expect(uploaded.withLockedValue { $0 } == total)
                // The first probe overtakes the rest of the transfer; later ones depend on how fast the
                // machine moves the bulk, so only a share of them is required.
                #expect(seen[0] < total, "the first urgent probe waited for the whole transfer: \(seen)")
                #expect(seen.filter { $0 < total }.count >= 5, "urgent probes answered mid-transfer: \(seen)")
            }
        }
    }

    @Test("a peer that vanishes fails every pending request at once")
    func abruptDisconnect() async throws {
        let server = try await RawWebSocketServer { $0.first }
        let transport = try await BLIPWebSocketClient.openTransport(to: "ws://127.0.0.1:\(server.port)/")
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        let pending = (0..<5).map { _ in Task { try await connection.sendRequest(BLIPRequest(profile: "never")) } }
        // Wait until the requests reached the peer, then drop TCP without a close frame.
        try await peer.executeThenClose { inbound, _ in
            var count = 0
            for try await frame in inbound where frame.opcode == .binary {
                count += 1
                if count == 5 { break }
            }
        }
        for request in pending {
            let error = await #expect(throws: BLIPConnectionError.self) { try await request.value }
            #expect(error?.code == .transportFailed, "\(String(describing: error))")
            #expect(error?.closeStatus?.initiator == .transport && error?.closeStatus?.code == .abnormalClosure)
        }
        let status = await running.value
        #expect(status.initiator == .transport && !status.isNormal && status.isTransient)
        await server.close()
    }

    @Test("close codes: 1000 for a normal close, 1002 for a protocol violation, 1003 for text")
    func closeCodes() async throws {
        // Our client closing normally: the server sees 1000.
        let server = try await RawWebSocketServer { $0.first }
        async let accepted = server.accept()
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { _ in }
        let peer = try await accepted
        let code = try await peer.executeThenClose { inbound, _ -> UInt16? in
            for try await frame in inbound where frame.opcode == .connectionClose {
                var data = frame.unmaskedData
                return data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
            }
            return nil
        }
        #expect(code == 1000)
        await server.close()

        try await withServer { blipServer in
            // A frame with a bad CRC: the peer broke the protocol, our server closes with 1002.
            let raw = try await RawWebSocketClient.connect(port: blipServer.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let violation = try await raw.channel.executeThenClose { inbound, outbound -> UInt16? in
                try await outbound.write(
                    RawWebSocketClient.frame(.binary, ByteBuffer(bytes: [1, 1, 0, 0xD2, 0x02, 0xEF, 0x8C]))
                )
                for try await frame in inbound where frame.opcode == .connectionClose {
                    var data = frame.data
                    return data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
                }
                return nil
            }
            #expect(violation == 1002)
            // A text message: 1003.
            let texter = try await RawWebSocketClient.connect(
                port: blipServer.port,
                subprotocols: ["BLIP_3+CBMobile_3"]
            )
            let text = try await texter.channel.executeThenClose { inbound, outbound -> UInt16? in
                try await outbound.write(RawWebSocketClient.frame(.text, ByteBuffer(string: "hello")))
                for try await frame in inbound where frame.opcode == .connectionClose {
                    var data = frame.data
                    return data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
                }
                return nil
            }
            #expect(text == 1003)
        }
    }

    @Test("a BLIP frame split into WebSocket fragments is reassembled; pings are answered")
    func fragmentsAndPings() async throws {
        try await withServer { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let encoder = BLIPFrameEncoder(dialect: .blip3)
            var data = ByteBuffer()
            _ = try encoder.writeMessageData(
                properties: ["Profile": "echo"],
                body: pattern(50),
                compressed: false,
                into: &data
            )
            var frame = ByteBuffer()
            _ = try encoder.encodeFrame(
                BLIPFrameHeader(messageNumber: 1, type: .request),
                data: &data,
                endOfMessage: true,
                maximumFrameSize: 16_384,
                into: &frame
            )
            let (first, second) = (
                frame.getSlice(at: 0, length: 10)!, frame.getSlice(at: 10, length: frame.readableBytes - 10)!
            )
            let (gotPong, gotReply) = try await raw.channel.executeThenClose { inbound, outbound -> (Bool, Bool) in
                try await outbound.write(RawWebSocketClient.frame(.ping, ByteBuffer(string: "p")))
                try await outbound.write(RawWebSocketClient.frame(.binary, first, fin: false))
                try await outbound.write(RawWebSocketClient.frame(.continuation, second, fin: true))
                var pong = false
                let decoder = BLIPFrameDecoder(dialect: .blip3)
                for try await frame in inbound {
                    if frame.opcode == .pong { pong = String(buffer: frame.data) == "p" }
                    if frame.opcode == .binary, case .data(let reply) = try decoder.decode(frame.data) {
                        return (pong, reply.header.type == .response)
                    }
                }
                return (pong, false)
            }
            #expect(gotPong && gotReply)
        }
    }

    @Test("the heartbeat pings; a peer that never answers fails the connection")
    func heartbeat() async throws {
        let server = try await RawWebSocketServer { $0.first }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = .milliseconds(100)
        configuration.heartbeatTimeout = .milliseconds(200)
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            configuration: configuration
        )
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        let pending = Task { try await connection.sendRequest(BLIPRequest(profile: "never")) }
        // The raw peer reads but answers nothing, pings included.
        let pings = try await peer.executeThenClose { inbound, _ -> Int in
            var pings = 0
            for try await frame in inbound {
                if frame.opcode == .ping { pings += 1 }
                if frame.opcode == .connectionClose { break }
            }
            return pings
        }
        #expect(pings == 1)
        let error = await #expect(throws: BLIPConnectionError.self) { try await pending.value }
        #expect(error?.code == .heartbeatTimedOut)
        _ = await running.value
        await server.close()
    }
}

/// DER bytes of the first certificate in PEM text.
func NIOSSLPemToDER(_ pem: String) throws -> [UInt8] {
    let body = pem.split(separator: "\n").filter { !$0.hasPrefix("-----") }.joined()
    guard let data = Foundation.Data(base64Encoded: body) else {
        throw BLIPConnectionError(.handshakeFailed, "bad PEM")
    }
    return Array(data)
}
