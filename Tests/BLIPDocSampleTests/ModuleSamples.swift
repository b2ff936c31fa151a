import BLIP
import BLIPHummingbird
import BLIPWebBridge
import BLIPWebSocket
import Foundation
import Hummingbird
import Testing

/// The samples of the smaller modules' catalogs: the Hummingbird mount and the web bridge, each served on
/// a free loopback port and reached over HTTP and BLIP.
@Suite("Samples of the Hummingbird and web bridge catalogs", .timeLimit(.minutes(1)))
struct ModuleSamples {
    @Test("MountingBLIP.md: a BLIP endpoint and a REST route on one Hummingbird application")
    func mountingBLIP() async throws {
        let ports = AsyncStream.makeStream(of: Int.self)
        /// The sample's `print`, read here for the port it names.
        @Sendable func print(_ items: Any...) {
            let line = items.map { "\($0)" }.joined(separator: " ")
            if let port = line.split(separator: ":").last.flatMap({ Int($0) }) { ports.continuation.yield(port) }
        }
        let running = Task {
            // sample: BLIPHummingbird.docc/MountingBLIP.md #1
            var blip = BLIPRouter()
            blip.register(profile: "whoami") { _, context in
                BLIPResponse(text: context.identity(as: String.self) ?? "nobody")
            }

            let router = Router(context: BasicBLIPRequestContext.self)
            router.get("/health") { _, _ in "ok" }
            router.blip("/:db/_blipsync", router: blip) { request, context in
                // The standalone server's helpers: basicCredentials, bearerToken, sessionToken, cookie(named:).
                let upgrade = BLIPUpgradeRequest(request)
                guard let login = upgrade.basicCredentials, login.user == "alice", login.password == "s3cret" else {
                    return .unauthorized(realm: "sync")
                }
                return .accept(identity: login.user)
            }

            let app = Application(
                router: router,
                server: .http1BLIPUpgrade(blipRouter: router),
                configuration: .init(address: .hostname("127.0.0.1", port: 0)),  // any free port (8080 by default)
                onServerRunning: { channel in print("serving on", channel.localAddress!) }
            )
            try await app.runService()
            // end sample
        }
        defer { running.cancel() }
        var announced = ports.stream.makeAsyncIterator()
        let port = try #require(await announced.next())
        #expect(try await httpGet(port: port, "/health").hasSuffix("\r\n\r\nok"))
        var client = BLIPWebSocketClient.Configuration()
        client.credentials = .basic(user: "alice", password: "s3cret")
        let who = try await BLIPWebSocketClient.connect(
            to: "ws://127.0.0.1:\(port)/db/_blipsync",
            configuration: client
        ) { connection in
            try await connection.sendRequest(BLIPRequest(profile: "whoami")).text
        }
        #expect(who == "alice")
        client.credentials = .basic(user: "alice", password: "guess")
        let refused = await #expect(throws: BLIPHandshakeError.self) {
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(port)/db/_blipsync", configuration: client) {
                _ in
            }
        }
        #expect(refused?.code == .unauthorized)
        running.cancel()
        _ = await running.result
    }

    @Test("BLIPWebBridge.md: a page and the browser client on the BLIP port")
    func webBridge() async throws {
        let webFolder = FileManager.default.temporaryDirectory
            .appendingPathComponent("blip-docs-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: webFolder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: webFolder) }
        try "<h1>bridge</h1>".write(toFile: webFolder + "/index.html", atomically: true, encoding: .utf8)
        let router = echoRouter()
        // sample: BLIPWebBridge.docc/BLIPWebBridge.md #1
        var configuration = BLIPWebSocketServer.Configuration()  // 127.0.0.1 by default
        configuration.port = 0  // any free port (4985 by default)
        configuration.staticFiles = BLIPStaticFiles(directory: webFolder)
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        // end sample
        let serving = Task { await server.run() }
        defer { serving.cancel() }
        #expect(try await httpGet(port: server.port, "/").hasSuffix("<h1>bridge</h1>"))
        let module = try await httpGet(port: server.port, BLIPBrowserClient.modulePath)
        #expect(module.hasPrefix("HTTP/1.1 200"))
        #expect(module.utf8.count > BLIPBrowserClient.module.count)
        let echoed = try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/bridge") { connection in
            try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hello")).text
        }
        #expect(echoed == "hello")
        await server.close()
    }
}
