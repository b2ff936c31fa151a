import ArgumentParser
import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import BLIPTool

let fixtures: URL = {
    var url = URL(fileURLWithPath: #filePath)
    while url.path != "/" {
        url.deleteLastPathComponent()
        if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
            return url.appendingPathComponent("Fixtures")
        }
    }
    fatalError("no Package.swift above \(#filePath)")
}()

@Suite("blip command line")
struct ArgumentTests {
    @Test("request parses its options")
    func request() throws {
        let command = try RequestCommand.parse([
            "ws://127.0.0.1:4985/db", "--profile", "echo", "--prop", "A=1", "--prop", "B=x=y", "--body", "hi",
            "--urgent", "--compressed", "--subprotocol", "BLIP_3+CBMobile_3", "--subprotocol", "BLIP", "--json",
        ])
        #expect(command.url == "ws://127.0.0.1:4985/db" && command.profile == "echo")
        #expect(command.urgent && command.compressed && command.json && !command.noReply)
        #expect(command.subprotocols == ["BLIP_3+CBMobile_3", "BLIP"])
        let request = try command.makeRequest()
        #expect(request.properties["A"] == "1" && request.properties["B"] == "x=y" && request.profile == "echo")
        #expect(String(buffer: request.body) == "hi" && request.isUrgent && request.isCompressed)
    }

    @Test(
        "invalid combinations are refused",
        arguments: [
            ["request", "ws://x", "--profile", "p", "--body", "a", "--body-file", "f"],
            ["request", "ws://x", "--profile", "p", "--prop", "novalue"],
            ["request", "ws://x"],
            ["request", "ws://x", "--profile", "p", "--pin-sha256", "abcd"],
            ["serve", "--tls-cert", "c.pem"],
            ["bench"],
            ["bench", "ws://x", "--self"],
            ["bench", "--self", "--workload", "nope"],
            ["decode"],
            ["decode", "f", "--direction", "up"],
            ["serve", "--dialect", "blip4"],
            ["serve", "--compression-level", "10"],
            ["serve", "--max-connections", "0"],
            ["serve", "--handshake-timeout", "0"],
            ["serve", "--require-basic", "alice"],
            ["serve", "--require-basic", ":password"],
            ["bench", "--self", "--compression-level", "-1"],
            ["bench", "--self", "--via", "ws://relay"],
            ["bench", "ws://x", "--rounds", "0"],
            ["bench", "ws://x", "--via", "ws://relay", "--workload", "urgent"],
            ["bench", "ws://x", "--rounds", "3", "--baseline"],
            ["request", "ws://x", "--profile", "p", "--proxy", "socks4://h:1"],
            ["request", "ws://x", "--profile", "p", "--tls-client-cert", "c.pem"],
            ["bench", "--self", "--proxy", "h:3128"],
            ["bench", "--self", "--tls-client-key", "k.pem"],
            ["serve", "--tls-require-client-cert", "ca.pem"],
            ["request", "ws://x", "--profile", "p", "--pin-chain-sha256", "abcd"],
        ]
    )
    func invalid(arguments: [String]) {
        #expect(throws: (any Error).self) { _ = try BLIPTool.parseAsRoot(arguments) }
    }

    @Test("proxy and client certificate options reach the client's configuration; serve can require certificates")
    func proxyAndCertificates() throws {
        let request = try RequestCommand.parse([
            "wss://h/db", "--profile", "p", "--proxy", "http://u:p%40ss@proxy:3128", "--tls-client-cert", "c.pem",
            "--tls-client-key", "k.pem",
        ])
        let configuration = request.makeConfiguration()
        #expect(configuration.proxy == .http(host: "proxy", port: 3128, username: "u", password: "p@ss"))
        #expect(
            configuration.tls.clientCertificate == .pemFiles(certificateChainPath: "c.pem", privateKeyPath: "k.pem")
        )
        let bench = try BenchCommand.parse([
            "wss://h/", "--proxy", "http://proxy", "--trust-pem", "ca.pem", "--tls-client-cert", "c.pem",
            "--tls-client-key", "k.pem",
        ])
        let benchConfiguration = BenchRunner(url: "wss://h/", options: bench).clientConfiguration
        #expect(benchConfiguration.proxy?.port == 1080)
        #expect(benchConfiguration.tls.trustRoots == .pemFile("ca.pem"))
        #expect(
            benchConfiguration.tls.clientCertificate
                == .pemFiles(certificateChainPath: "c.pem", privateKeyPath: "k.pem")
        )
        let pin = String(repeating: "ab", count: 32)
        let socks = try RequestCommand.parse([
            "wss://10.0.0.2/db", "--profile", "p", "--proxy", "socks5h://u:pw@proxy", "--tls-server-name",
            "sync.example",
            "--pin-chain-sha256", pin, "--proxy-from-environment",
        ])
        let socksConfiguration = socks.makeConfiguration()
        #expect(socksConfiguration.proxy == .socks5(host: "proxy", port: 1080, username: "u", password: "pw"))
        #expect(socksConfiguration.tls.serverName == "sync.example")
        #expect(socksConfiguration.tls.pinnedChainSHA256 == [[UInt8](repeating: 0xAB, count: 32)])
        #expect(socksConfiguration.proxyEnvironment != nil)
        #expect(request.makeConfiguration().proxyEnvironment == nil)
        let serve = try ServeCommand.parse([
            "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-require-client-cert", "ca.pem",
        ])
        #expect(serve.tlsRequireClientCert == "ca.pem")
    }

    @Test("serve, bench and decode parse their options")
    func others() throws {
        let serve = try ServeCommand.parse([
            "--host", "::1", "--port", "0", "--path", "/db", "--protocols", "BLIP", "--dialect", "seed",
            "--max-connections", "100", "--handshake-timeout", "2.5", "--require-basic", "alice:pass:word",
        ])
        #expect(serve.requireBasic == "alice:pass:word")
        let basic = try #require(serve.requireBasic.flatMap(BasicAuthentication.init))
        #expect(basic.user == "alice" && basic.password == "pass:word")
        #expect(serve.port == 0 && serve.path == "/db" && serve.protocols == "BLIP" && serve.dialect?.isSeed == true)
        #expect(serve.maxConnections == 100 && serve.handshakeTimeout == 2.5)
        let bench = try BenchCommand.parse([
            "--self", "--workload", "bulk", "--data", "text", "--compressed", "--direction", "down", "--baseline",
            "--fixed-window", "--compression-level", "1", "--no-warm-up",
        ])
        #expect(
            bench.startsServer && bench.workload == .bulk && bench.data == .text && bench.direction == .down
                && bench.baseline && bench.fixedWindow && bench.compressionLevel == 1 && !bench.warmsUp
        )
        let decode = try DecodeCommand.parse(["--dialect", "blip2", "--hex", "01 01 00", "--json"])
        #expect(decode.dialect == .blip2 && decode.hexFrames == ["01 01 00"] && decode.json)
    }
}

@Suite("blip autobahn-client")
struct AutobahnClientArgumentTests {
    @Test("autobahn-client parses its options and stays out of the help")
    func parses() throws {
        let command = try AutobahnClientCommand.parse([
            "--url", "ws://127.0.0.1:9002", "--agent", "swift-blip", "--case", "3", "--case", "7",
        ])
        #expect(command.url == "ws://127.0.0.1:9002" && command.agent == "swift-blip" && command.cases == [3, 7])
        #expect(throws: (any Error).self) { _ = try BLIPTool.parseAsRoot(["autobahn-client", "--url", "http://x/"]) }
        #expect(!BLIPTool.helpMessage().contains("autobahn"))
    }
}

@Suite("blip decode")
struct DecodeTests {
    @Test("blip proxy's lines: named properties redacted, JSON fields those of blip decode --json")
    func proxyLogFormat() throws {
        let (frame, _, event) = try fixtureMessageEvent(connection: 7)
        let text = try #require(
            ProxyLogFormat(json: false, verbose: false, redactedProperties: ["X-Test"]).line(for: event)
        )
        #expect(text.contains("#7 c2s MSG#1 complete") && text.contains("X-Test: (redacted)"))
        #expect(text.contains("\"Hello, BLIP!\"") && !text.contains("fixture-1"))
        let line = try #require(ProxyLogFormat(json: true, verbose: false, redactedProperties: []).line(for: event))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["connection"] as? Int == 7 && object["direction"] as? String == "c2s")
        #expect(object["time"] as? String == "2026-09-21T14:13:20.250000Z")
        #expect(object["duration_ms"] as? Double == 1.5)
        let decoded = Dissector(dialect: .blip3, direction: "c2s").decode([("f000", frame)]).messages[0]
        for key in decoded.keys {
            #expect("\(object[key] ?? "missing")" == "\(decoded[key]!)", "\(key)")
        }
    }

    @Test(
        "a capture scenario folder decodes both directions, as the set's manifest says",
        arguments: [
            "go-blip/08-multi-frame-with-acks", "go-blip/12-session-sequence", "go-blip-d3/13-token-table",
            "litecore/09-multi-frame-compressed",
        ]
    )
    func folder(path: String) throws {
        let command = try DecodeCommand.parse([fixtures.appendingPathComponent(path).path])
        let (dialect, directions) = try command.loadFrames()
        let expected = try Self.expectedMessages(path)
        var decoded: [String: [String: Any]] = [:]
        for (name, frames) in directions {
            let result = Dissector(dialect: dialect, direction: name).decode(frames)
            #expect(result.error == nil)
            for message in result.messages {
                decoded["\(name)-\(message["type"]!)#\(message["number"]!)"] = message
            }
        }
        #expect(decoded.count == expected.count)
        for (key, sha) in expected {
            #expect(decoded[key]?["body_sha256"] as? String == sha, "\(key)")
        }
    }

    static func expectedMessages(_ path: String) throws -> [String: String] {
        let set = String(path.split(separator: "/")[0])
        let folder = String(path.split(separator: "/")[1])
        let manifest =
            try JSONSerialization.jsonObject(
                with: Data(contentsOf: fixtures.appendingPathComponent("\(set)/manifest.json"))
            ) as! [String: Any]
        let scenario = (manifest["scenarios"] as! [[String: Any]]).first { $0["dir"] as? String == folder }!
        var result: [String: String] = [:]
        for message in scenario["messages"] as! [[String: Any]] {
            let direction = message["direction"] as? String == "client->server" ? "c2s" : "s2c"
            result["\(direction)-\(message["id"] as! String)"] = message["body_sha256"] as? String
        }
        return result
    }

    @Test("the dialect comes from the set's manifest; a whole set decodes every scenario")
    func manifests() throws {
        let scenario = try DecodeCommand.parse([
            fixtures.appendingPathComponent("go-blip-d3/01-request-with-properties").path
        ])
        #expect(try scenario.loadFrames().0 == .blip2)
        let set = try DecodeCommand.parse([fixtures.appendingPathComponent("go-blip-d3").path])
        let (dialect, directions) = try set.loadFrames()
        #expect(dialect == .blip2)
        #expect(directions.count == 15)  // 8 scenarios, both directions except the no-reply one
        for (name, frames) in directions {
            #expect(Dissector(dialect: dialect, direction: name).decode(frames).error == nil, "\(name)")
        }
    }

    @Test("a bad frame is marked and stops its direction")
    func badFrame() throws {
        let result = Dissector(dialect: .blip3, direction: "c2s").decode([
            ("ok", ByteBuffer(bytes: [0x01, 0x01, 0x00, 0xD2, 0x02, 0xEF, 0x8D])),
            ("bad", ByteBuffer(bytes: [0x02, 0x01, 0x00, 0xD2, 0x02, 0xEF, 0x8D])),
            ("never", ByteBuffer(bytes: [0x03, 0x01, 0x00])),
        ])
        #expect(result.messages.count == 1)
        #expect(result.error?.contains("CRC-32 mismatch") == true)
        #expect(result.frames.count == 2)
        #expect(result.lines.last?.contains("!!") == true)
    }
}

@Suite("blip request and serve", .timeLimit(.minutes(3)))
struct RequestExitCodeTests {
    @Test("exit status 0 for a reply, 3 for an ERR reply, 1 when the connection fails or the reply is late")
    func exitCodes() async throws {
        var router = BLIPRouter()
        router.register(StandardProfiles())
        router.register(profile: "never") { _, _ in
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        async let serving: Void = server.run()
        let url = "ws://127.0.0.1:\(server.port)/"
        try await RequestCommand.parse([url, "--profile", "echo", "--body", "x"]).run()
        let error = await #expect(throws: ExitCode.self) {
            try await RequestCommand.parse([url, "--profile", "error"]).run()
        }
        #expect(error == ExitCode(3))
        let notFound = await #expect(throws: ExitCode.self) {
            try await RequestCommand.parse([url, "--profile", "unknown-profile"]).run()
        }
        #expect(notFound == ExitCode(3))
        try await RequestCommand.parse([url, "--profile", "echo", "--no-reply"]).run()
        let late = await #expect(throws: ExitCode.self) {
            try await RequestCommand.parse([url, "--profile", "never", "--timeout", "0.2"]).run()
        }
        #expect(late == ExitCode(1))
        try await RequestCommand.parse([url, "--profile", "echo", "--timeout", "30"]).run()
        await server.close()
        await serving
        let failed = await #expect(throws: ExitCode.self) {
            try await RequestCommand.parse([url, "--profile", "echo"]).run()
        }
        #expect(failed == ExitCode(1))
    }

    @Test("exit status 2 when the server refuses the handshake; the report names status, challenge and body")
    func refusedHandshake() async throws {
        let server = try await BLIPWebSocketServer.bindStandardProfiles { $0.path = "/db/_blipsync" }
        async let serving: Void = server.run()
        for json in [false, true] {
            let refused = await #expect(throws: ExitCode.self) {
                try await RequestCommand.parse(
                    ["ws://127.0.0.1:\(server.port)/other", "--profile", "echo"] + (json ? ["--json"] : [])
                ).run()
            }
            #expect(refused == ExitCode(2))
        }
        try await RequestCommand.parse(["ws://127.0.0.1:\(server.port)/db/_blipsync", "--profile", "echo"]).run()
        await server.close()
        await serving

        let report = RequestCommand.report(
            BLIPHandshakeError(
                code: .unauthorized,
                url: "ws://h/db",
                status: 401,
                reason: "Unauthorized",
                headers: ["WWW-Authenticate": "Basic realm=\"sg\"", "Content-Length": "5"],
                body: Array("login".utf8)
            )
        )
        #expect(report.contains("HTTP 401 Unauthorized from ws://h/db\nWWW-Authenticate: Basic realm=\"sg\"\n\nlogin"))
        #expect(!report.contains("Content-Length"))
    }

    @Test(
        "--user becomes Basic credentials; --header takes Name: value with a token name; both Authorization is an error"
    )
    func credentialsOptions() throws {
        let configuration = try RequestCommand.parse(
            ["ws://x", "--profile", "p", "--user", "alice:pa:ss", "--header", "Cookie: a=b", "--max-redirects", "0"]
        ).makeConfiguration()
        let headers = configuration.headers.map { "\($0.name)=\($0.value)" }
        #expect(headers == ["Cookie=a=b"])
        #expect(configuration.credentials == .basic(user: "alice", password: "pa:ss"))
        #expect(configuration.maximumRedirects == 0)
        for arguments in [
            ["--user", "nopassword"],
            ["--user", "a:b", "--header", "authorization: Bearer x"],
            ["--header", "no colon"],
            ["--header", "Bad Name: x"],
            ["--max-redirects", "-1"],
            ["--timeout", "0"],
            ["--timeout", "-1"],
        ] {
            #expect(throws: (any Error).self) { try RequestCommand.parse(["ws://x", "--profile", "p"] + arguments) }
        }
    }

    @Test("the stats profile counts what the server did")
    func stats() async throws {
        let profiles = StandardProfiles()
        var router = BLIPRouter()
        router.register(profiles)
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        async let serving: Void = server.run()
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "12345"))
            _ = try await connection.sendRequest(
                BLIPRequest(profile: "sink", body: ByteBuffer(repeating: 0, count: 1000))
            )
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "error")) }
            let reply = try await connection.sendRequest(BLIPRequest(profile: "stats"))
            let stats = try JSONSerialization.jsonObject(with: Data(reply.body.readableBytesView)) as! [String: Int]
            #expect(stats["echo"] == 1 && stats["sink"] == 1 && stats["error"] == 1)
            #expect(stats["bytesIn"] == 1005)
        }
        await server.close()
        await serving
    }

    @Test("delay, call-peer and close-connection: the profiles the browser tests drive")
    func browserTestProfiles() async throws {
        let server = try await BLIPWebSocketServer.bindStandardProfiles()
        async let serving: Void = server.run()
        // The client's own handlers, which call-peer reaches.
        var clientRouter = BLIPRouter()
        clientRouter.register(profile: "shout") { request, _ in
            BLIPResponse(
                properties: ["Seen-Urgent": "\(request.isUrgent)", "Seen-X": request.properties["X"] ?? "-"],
                text: String(buffer: request.body).uppercased()
            )
        }
        clientRouter.register(profile: "refuse") { _, _ in
            throw BLIPError(domain: .http, code: BLIPError.Code(rawValue: 418), message: "no")
        }
        let url = "ws://127.0.0.1:\(server.port)/"
        try await BLIPWebSocketClient.connect(to: url, router: clientRouter) { connection in
            let delayed = try await connection.sendRequest(
                BLIPRequest(profile: "delay", properties: ["Milliseconds": "20"])
            )
            #expect(delayed.body.readableBytes == 0)
            await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "delay", properties: ["Milliseconds": "60001"]))
            }
            let call = BLIPRequest(
                profile: "call-peer",
                properties: ["Call-Profile": "shout", "Call-Property-X": "y", "Call-Urgent": "yes"],
                text: "hi"
            )
            let shouted = try await connection.sendRequest(call)
            #expect(String(buffer: shouted.body) == "HI")
            #expect(shouted.properties["Seen-Urgent"] == "true" && shouted.properties["Seen-X"] == "y")
            let refused = await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(
                    BLIPRequest(profile: "call-peer", properties: ["Call-Profile": "refuse"])
                )
            }
            #expect(refused?.code.rawValue == 418 && refused?.message == "no")
            // A code a close frame cannot carry is refused, not a crash.
            await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(
                    BLIPRequest(profile: "close-connection", properties: ["Close-Code": "1005"])
                )
            }
        }
        // The connection ends with the server's 4001, which connect reports once its body is done.
        let ended = await #expect(throws: BLIPConnectionError.self) {
            try await BLIPWebSocketClient.connect(to: url) { connection in
                let pending = Task {
                    try await connection.sendRequest(
                        BLIPRequest(profile: "delay", properties: ["Milliseconds": "30000"])
                    )
                }
                let closing = BLIPRequest(
                    profile: "close-connection",
                    properties: ["Close-Code": "4001", "Close-Reason": "bye"]
                )
                let closed = Task { try await connection.sendRequest(closing) }
                for result in [await closed.result, await pending.result] {
                    guard case .failure(let error as BLIPConnectionError) = result else {
                        Issue.record("expected the close to fail the request, got \(result)")
                        continue
                    }
                    #expect(error.closeStatus?.code == 4001 && error.closeStatus?.reason == "bye")
                }
            }
        }
        #expect(ended?.closeStatus?.code == 4001)
        await server.close()
        await serving
    }
}

// On a loaded machine each task hop of a round trip here can wait: the workloads are kept small, and the
// limit wide.
@Suite("blip bench workloads", .timeLimit(.minutes(5)))
struct BenchWorkloadTests {
    @Test("each workload runs against the standard profiles and reports what it measured")
    func workloads() async throws {
        let server = try await BLIPWebSocketServer.bindStandardProfiles {
            $0.connection.maximumIncomingMessageSize = 1 << 30
            $0.rawEndpoint = .forSubprotocol(BLIPRawWebSocket.benchmarkSubprotocol)  // the baselines
        }
        async let serving: Void = server.run()
        let url = "ws://127.0.0.1:\(server.port)/"
        let runner = BenchRunner(url: url, options: try BenchCommand.parse([url, "--no-warm-up"]))

        let rt = try await runner.roundTrips(count: 10, concurrency: 1, warmUp: 2, size: 100, name: "rt")
        #expect(rt.count == 10 && (rt.messagesPerSecond ?? 0) > 0 && rt.p50 != nil)
        let pipelined = try await runner.roundTrips(count: 64, concurrency: 16, warmUp: 2, size: 100, name: "p")
        #expect(pipelined.concurrency == 16 && (pipelined.messagesPerSecond ?? 0) > 0)
        let callbacks = BenchRunner(url: url, options: try BenchCommand.parse([url, "--no-warm-up", "--callbacks"]))
        let driven = try await callbacks.roundTrips(count: 64, concurrency: 16, warmUp: 2, size: 100, name: "p")
        #expect(driven.workload == "p-callbacks" && driven.count == 64 && (driven.messagesPerSecond ?? 0) > 0)
        for direction in [BenchCommand.Direction.up, .down] {
            let bulk = try await runner.bulk(size: 1 << 20, data: .text, compressed: true, direction: direction)
            // Compressed JSON lines take well under half their size on the wire.
            #expect((bulk.wireBytes ?? 0) > 0 && (bulk.wireBytes ?? .max) < 1 << 19)
        }
        let stream = try await runner.streamedMessage(size: 3 << 20 + 12_345, data: .random)
        #expect((stream.wireBytes ?? 0) > 3 << 20 + 12_345)
        #expect(stream.extra["client_peak_rss_mib"] != nil)
        let streamedReply = try await runner.streamedReply(size: 3 << 20 + 12_345, data: .random)
        #expect((streamedReply.wireBytes ?? 0) > 3 << 20 + 12_345 && streamedReply.direction == "down")
        #expect(streamedReply.extra["client_peak_rss_mib"] != nil)
        let idle = try await runner.idleConnections(count: 8)
        #expect(idle.count == 8 && idle.extra["client_kib_per_connection"] != nil)
        let fanIn = try await runner.fanIn(connections: 4, concurrency: 3, count: 60, size: 100)
        // Every request is counted once, whichever client took it.
        #expect(fanIn.count == 60 && fanIn.concurrency == 12 && fanIn.p99 != nil)
        let inMemory = try await runner.inMemory(.rt, count: 20, size: 100)
        #expect(inMemory.count == 20 && (inMemory.messagesPerSecond ?? 0) > 0)
        let inMemoryPipelined = try await runner.inMemory(.pipelined, count: 200, size: 100)
        #expect(inMemoryPipelined.count == 200 && inMemoryPipelined.concurrency == 64)
        let inMemoryBulk = try await runner.inMemory(.bulk, count: nil, size: 1 << 20)
        #expect(inMemoryBulk.workload == "in-memory-bulk-random" && (inMemoryBulk.mibPerSecond ?? 0) > 0)
        var handlerShape = BenchResult(
            workload: "rt",
            count: 1,
            concurrency: 1,
            messagesPerSecond: 1,
            data: "",
            compressed: false,
            direction: "both"
        )
        try await runner.compareToBaselines(&handlerShape, count: 20, concurrency: 4, warmUp: 2, size: 100)
        #expect((handlerShape.ratio ?? 0) > 0 && (handlerShape.handlerRatio ?? 0) > 0)

        await server.close()
        await serving
    }
}

@Suite("blip serve --require-basic", .timeLimit(.minutes(3)))
struct RequireBasicTests {
    /// A loop of its own: the shared loops are busy in the full suite.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// Connects with `authorization` (if any) and returns what `whoami` answers, or the handshake's error.
    static func whoami(port: Int, authorization: String?) async -> Result<String, BLIPConnectionError> {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        if let authorization { configuration.headers = ["Authorization": authorization] }
        do {
            let identity = NIOLockedValueBox("")
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(port)/",
                configuration: configuration,
                eventLoopGroup: Self.group
            ) {
                connection in
                let reply = try await connection.sendRequest(BLIPRequest(profile: "whoami"))
                identity.withLockedValue { $0 = String(buffer: reply.body) }
            }
            return .success(identity.withLockedValue { $0 })
        } catch let error as BLIPConnectionError {
            return .failure(error)
        } catch {
            return .failure(BLIPConnectionError(.handshakeFailed, "\(error)"))
        }
    }

    static func expectRefused(
        _ result: Result<String, BLIPConnectionError>,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard case .failure(let error) = result else {
            Issue.record("served: \(result)", sourceLocation: sourceLocation)
            return
        }
        #expect(
            error.code == .handshakeFailed && "\(error)".contains("401"),
            "\(error)",
            sourceLocation: sourceLocation
        )
    }

    // alice:s3cret, alice:wrong, bob:s3cret
    static let right = "Basic YWxpY2U6czNjcmV0"
    static let wrongPassword = "Basic YWxpY2U6d3Jvbmc="
    static let wrongUser = "Basic Ym9iOnMzY3JldA=="

    @Test("the handler: 401 with a Basic challenge without the right credentials; the user name as identity with them")
    func handler() async throws {
        let basic = try #require(BasicAuthentication("alice:s3cret"))
        var router = BLIPRouter()
        router.register(StandardProfiles())
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(
            configuration: configuration,
            router: router,
            eventLoopGroup: Self.group,
            upgradeHandler: basic.upgradeHandler
        )
        async let serving: Void = server.run()
        for authorization in [nil, Self.wrongPassword, Self.wrongUser, "Bearer x"] {
            Self.expectRefused(await Self.whoami(port: server.port, authorization: authorization))
        }
        #expect(try await Self.whoami(port: server.port, authorization: Self.right).get() == "alice")
        let decision = try await basic.upgradeHandler(BLIPUpgradeRequest(uri: "/"))
        guard case .refuse(401, let headers, _) = decision else {
            Issue.record("\(decision)")
            return
        }
        #expect(headers.first("WWW-Authenticate") == "Basic realm=\"blip\"")
        await server.close()
        await serving
    }

    @Test("end to end: blip serve --require-basic refuses a wrong password and serves the right one")
    func endToEnd() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let server = try await ServerProcess.start(executable, arguments: ["--require-basic", "alice:s3cret"])
        defer { _ = server.stop() }  // at once if the test failed before the end; a no-op otherwise
        Self.expectRefused(await Self.whoami(port: server.port, authorization: Self.wrongPassword))
        #expect(try await Self.whoami(port: server.port, authorization: Self.right).get() == "alice")
        _ = await server.stopped()
    }
}
