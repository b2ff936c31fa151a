import Foundation
import NIOCore
import NIOPosix
import Testing

/// `blip serve` checks the `Origin` of every upgrade: a page of another site gets 403 even with valid
/// credentials, unless `--allow-origin` names it.
@Suite("blip serve and browser origins", .timeLimit(.minutes(2)))
struct ServeOriginTests {
    static let credentials = "Authorization: Basic " + Data("alice:s3cret".utf8).base64EncodedString()

    @Test("a cross-site Origin with valid credentials gets 403 by default, 101 with --allow-origin")
    func crossSite() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let strict = try await ServerProcess.start(executable, arguments: ["--require-basic", "alice:s3cret"])
        defer { _ = strict.stop() }
        #expect(try await Self.status(port: strict.port, origin: "https://evil.example") == 403)
        #expect(try await Self.status(port: strict.port, origin: "http://127.0.0.1:\(strict.port)") == 101)
        #expect(try await Self.status(port: strict.port, origin: nil) == 101)
        _ = await strict.stopped()

        let open = try await ServerProcess.start(
            executable,
            arguments: ["--require-basic", "alice:s3cret", "--allow-origin", "https://*.example"]
        )
        defer { _ = open.stop() }
        #expect(try await Self.status(port: open.port, origin: "https://app.example") == 101)
        #expect(try await Self.status(port: open.port, origin: "https://evil.test") == 403)
        _ = await open.stopped()
    }

    /// The status code of a browser-like upgrade request (with credentials) to `blip serve`.
    static func status(port: Int, origin: String?) async throws -> Int {
        var fields = [
            "Host: 127.0.0.1:\(port)", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3",
            Self.credentials,
        ]
        if let origin { fields.append("Origin: \(origin)") }
        let request = "GET / HTTP/1.1\r\n" + fields.map { $0 + "\r\n" }.joined() + "\r\n"
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(string: request))
            var head = ""
            for try await chunk in inbound {
                head += String(buffer: chunk)
                if head.contains("\r\n") { break }
            }
            return Int(head.split(separator: " ").dropFirst().first ?? "") ?? 0
        }
    }
}
