import BLIP
import BLIPTestSupport
import BLIPWebBridge
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// `blip demo --web` from outside, as the page would see it: the page and the client module over plain
/// HTTP, and over BLIP the native side's answers and its calls into the page.
@Suite("blip demo --web", .timeLimit(.minutes(3)))
struct WebDemoTests {
    @Test(
        "the page and the client are served, the native side answers and calls in",
        .enabled(if: ServerProcess.executable != nil, "the blip executable was not built beside the tests")
    )
    func webDemo() async throws {
        let demo = try await ServerProcess.start(
            ServerProcess.executable!,
            command: ["demo", "--web", "--port", "0", "--seconds", "120"]
        )
        do {
            let base = "127.0.0.1:\(demo.port)"

            let (page, pageResponse) = try await URLSession.shared.data(from: URL(string: "http://\(base)/")!)
            #expect((pageResponse as? HTTPURLResponse)?.statusCode == 200)
            #expect(String(decoding: page, as: UTF8.self).contains("from '/_blip/blip.js'"))
            let (module, _) = try await URLSession.shared.data(from: URL(string: "http://\(base)/_blip/blip.js")!)
            #expect(Array(module) == BLIPBrowserClient.module)

            let ticks = NIOLockedValueBox<[String]>([])
            var router = BLIPRouter()
            router.register(profile: "web.tick") { request, _ in
                ticks.withLockedValue { $0.append(request.properties["Tick"] ?? "?") }
                return BLIPResponse(text: "page saw tick \(request.properties["Tick"] ?? "?")")
            }
            try await BLIPWebSocketClient.connect(to: "ws://\(base)/bridge", router: router) { connection in
                let reply = try await connection.sendRequest(BLIPRequest(profile: "native.ask", text: "hello"))
                #expect(String(buffer: reply.body) == "native read 5 bytes")
                #expect(reply.properties["Native-Time"] != nil)
                let error = await #expect(throws: BLIPError.self) {
                    try await connection.sendRequest(BLIPRequest(profile: "native.fail"))
                }
                #expect(error?.code.rawValue == 418)
                // The native side calls into the page once a second.
                try await eventually { ticks.withLockedValue { $0.count >= 2 } }
                #expect(ticks.withLockedValue { Array($0.prefix(2)) } == ["1", "2"])
            }
        } catch {
            print(await demo.stopped())
            throw error
        }
        let output = await demo.stopped()
        #expect(!output.contains("Fatal"), "\(output)")
    }
}
