internal import BLIP
internal import BLIPWebBridge
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore

/// `blip demo --web`: the native half of a hybrid app's bridge. Serves a page (the web half) and the
/// browser client on one loopback port, answers the page's requests, and calls into the page once a
/// second, printing both directions as they happen.
struct WebDemo {
    var port: Int
    var duration: Duration?

    func run() async throws {
        var logger = Logger(label: "blip.demo.web")
        logger.logLevel = .warning
        let site = FileManager.default.temporaryDirectory.appendingPathComponent("blip-web-demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: site, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: site) }
        try Data(PackageResources.web_demo_html).write(to: site.appendingPathComponent("index.html"))

        var router = BLIPRouter()
        router.register(StandardProfiles())
        router.register(profile: "native.ask") { request, _ in
            let text = String(buffer: request.body)
            Self.say("web → native   native.ask  \"\(text)\"")
            return BLIPResponse(
                properties: ["Native-Time": Date().formatted(.iso8601)],
                text: "native read \(text.utf8.count) bytes"
            )
        }
        router.register(profile: "native.fail") { _, _ in
            Self.say("web → native   native.fail (answered ERR HTTP/418)")
            throw BLIPError(domain: .http, code: BLIPError.Code(rawValue: 418), message: "native refuses, as asked")
        }
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = self.port
        configuration.staticFiles = BLIPStaticFiles(directory: site.path)
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router, logger: logger)
        print("BLIP web demo: open http://127.0.0.1:\(server.port)/ in a browser (Ctrl-C stops)")
        fflush(nil)
        async let serving: Void = server.run { accepted in
            Self.say("page connected (\(accepted.subprotocol ?? "no subprotocol"))")
            Task { await Self.tick(accepted.connection) }
        }
        if let duration = self.duration {
            try? await Task.sleep(for: duration)
            await server.close()
        }
        await serving
    }

    /// Calls into the page once a second until it leaves.
    private static func tick(_ connection: BLIPConnection) async {
        var tick = 0
        while connection.closeStatus == nil {
            try? await Task.sleep(for: .seconds(1))
            tick += 1
            let started = ContinuousClock.now
            do {
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "web.tick", properties: ["Tick": "\(tick)"], text: "tick \(tick) from Swift")
                )
                let elapsed = ContinuousClock.now - started
                let milliseconds = elapsed / .milliseconds(1)
                let shown = milliseconds.formatted(.number.precision(.fractionLength(2)))
                Self.say("native → web   web.tick #\(tick): \"\(String(buffer: reply.body))\" in \(shown) ms")
            } catch {
                if connection.closeStatus == nil { Self.say("native → web   web.tick #\(tick) failed: \(error)") }
            }
        }
        Self.say("page left: \(connection.closeStatus.map { "\($0)" } ?? "")")
    }

    private static func say(_ line: String) {
        print(line)
        fflush(nil)
    }
}
