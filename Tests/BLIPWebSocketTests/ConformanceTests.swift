import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import NIOWebSocket
import Testing

/// RFC 6455 rules that NIO's frame decoder leaves to our handler, over loopback against the pure echo
/// endpoint of `blip serve --echo-only` (server role) and against a plain NIO server (client role). The
/// Autobahn|Testsuite run of `.ci/autobahn.sh` covers the same ground more widely; these keep each fix.
@Suite("WebSocket conformance over loopback", .timeLimit(.minutes(3)))
struct ConformanceTests {
    static func echoServerConfiguration() -> BLIPWebSocketServer.Configuration {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.rawEndpoint = .always
        configuration.rawEndpointMode = .echo
        configuration.maximumMessageSize = 1 << 20
        return configuration
    }

    /// What the echo server sent back for `frames` (written in one go, then a close 1000 of our own): the
    /// frames before its close frame, and its close code.
    struct Exchange {
        var frames: [WebSocketFrame]
        var closeCode: UInt16?

        var texts: [String] { self.frames.map { String(buffer: $0.data) } }
    }

    static func exchange(_ frames: [WebSocketFrame], port: Int) async throws -> Exchange {
        let client = try await RawWebSocketClient.connect(port: port, subprotocols: [])
        return try await client.channel.executeThenClose { inbound, outbound in
            var closing = ByteBuffer()
            closing.write(webSocketErrorCode: .normalClosure)
            try await outbound.write(contentsOf: frames + [RawWebSocketClient.frame(.connectionClose, closing)])
            var received: [WebSocketFrame] = []
            for try await frame in inbound {
                guard frame.opcode != .connectionClose else {
                    var data = frame.data
                    let code = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }
                    return Exchange(frames: received, closeCode: code ?? 1005)
                }
                received.append(frame)
                if received.count > 100 { break }
            }
            return Exchange(frames: received, closeCode: nil)
        }
    }

    static func text(_ string: String, fin: Bool = true, opcode: WebSocketOpcode = .text) -> WebSocketFrame {
        RawWebSocketClient.frame(opcode, ByteBuffer(string: string), fin: fin)
    }

    static func closeFrame(_ payload: [UInt8]) -> WebSocketFrame {
        RawWebSocketClient.frame(.connectionClose, ByteBuffer(bytes: payload))
    }

    @Test("echo mode echoes text as text and binary as binary, benchmark commands included")
    func pureEcho() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let result = try await Self.exchange(
                [
                    Self.text("sink:10"),
                    RawWebSocketClient.frame(.binary, ByteBuffer(bytes: [1, 2, 3])),
                    Self.text("source:10"),
                ],
                port: server.port
            )
            #expect(result.frames.map(\.opcode) == [.text, .binary, .text])
            #expect(result.texts == ["sink:10", "\u{1}\u{2}\u{3}", "source:10"])
            #expect(result.closeCode == 1000)
        }
    }

    @Test("a message may come in any number of fragments (70 000 here, past NIO's aggregator's 65 536)")
    func manyFragments() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let count = 70_000
            var frames = [RawWebSocketClient.frame(.binary, ByteBuffer(bytes: [0]), fin: false)]
            for index in 1..<count {
                frames.append(
                    RawWebSocketClient.frame(
                        .continuation,
                        ByteBuffer(bytes: [UInt8(index % 251)]),
                        fin: index == count - 1
                    )
                )
            }
            let result = try await Self.exchange(frames, port: server.port)
            #expect(result.closeCode == 1000)
            #expect(result.frames.count == 1 && result.frames.first?.opcode == .binary)
            let expected = ByteBuffer(bytes: (0..<count).map { UInt8($0 % 251) })
            #expect(result.frames.first?.data == expected)
        }
    }

    @Test("fragments are checked one by one: a reserved bit on a continuation frame fails the connection")
    func reservedBitOnContinuation() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            var second = Self.text("b", opcode: .continuation)
            second.rsv1 = true
            let result = try await Self.exchange([Self.text("a", fin: false), second], port: server.port)
            #expect(result.frames.isEmpty && result.closeCode == 1002)
        }
    }

    @Test("a client's frames must be masked: an unmasked text or binary frame fails the connection")
    func unmaskedFromClient() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            for opcode in [WebSocketOpcode.text, .binary] {
                let unmasked = WebSocketFrame(fin: true, opcode: opcode, data: ByteBuffer(string: "plain"))
                let result = try await Self.exchange([unmasked], port: server.port)
                #expect(result.frames.isEmpty && result.closeCode == 1002, "\(opcode)")
            }
        }
    }

    @Test("invalid UTF-8 in a text fragment fails the connection at once, before the message ends")
    func utf8FailsFast() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            // The ping would be answered if the fragment were not checked until the message's end.
            let bad = RawWebSocketClient.frame(.text, ByteBuffer(bytes: [0x61, 0xC0, 0x80]), fin: false)
            let ping = RawWebSocketClient.frame(.ping, ByteBuffer(string: "p"))
            let result = try await Self.exchange([bad, ping], port: server.port)
            #expect(result.frames.isEmpty && result.closeCode == 1007)
        }
    }

    @Test("a code point split between fragments is fine; one cut short at the message's end is not")
    func utf8AcrossFragments() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let split = try await Self.exchange(
                [
                    RawWebSocketClient.frame(.text, ByteBuffer(bytes: [0x68, 0xC3]), fin: false),
                    RawWebSocketClient.frame(.continuation, ByteBuffer(bytes: []), fin: false),
                    RawWebSocketClient.frame(.continuation, ByteBuffer(bytes: [0xA9, 0xF0, 0x9F]), fin: false),
                    RawWebSocketClient.frame(.continuation, ByteBuffer(bytes: [0x98, 0x80]), fin: true),
                ],
                port: server.port
            )
            #expect(split.texts == ["hé😀"] && split.frames.first?.opcode == .text && split.closeCode == 1000)
            let cut = try await Self.exchange(
                [
                    RawWebSocketClient.frame(.text, ByteBuffer(bytes: [0x68, 0xF0, 0x9F]), fin: false),
                    RawWebSocketClient.frame(.continuation, ByteBuffer(bytes: [0x98]), fin: true),
                ],
                port: server.port
            )
            #expect(cut.frames.isEmpty && cut.closeCode == 1007)
        }
    }

    @Test("on a protocol error, replies to the messages before it still go out, then the close frame")
    func echoBeforeFailing() async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let reserved = RawWebSocketClient.frame(
                WebSocketOpcode(encodedWebSocketOpcode: 5)!,
                ByteBuffer(string: "?")
            )
            let result = try await Self.exchange([Self.text("hello"), reserved], port: server.port)
            #expect(result.texts == ["hello"] && result.closeCode == 1002)
        }
    }

    @Test(
        "fragmentation errors, oversized messages and long control frames fail the connection",
        arguments: [
            ([ConformanceTests.text("x", opcode: .continuation)], 1002),
            ([ConformanceTests.text("a", fin: false), ConformanceTests.text("b")], 1002),
            ([ConformanceTests.text("a", fin: false), ConformanceTests.text("b", fin: false, opcode: .binary)], 1002),
            (
                [
                    RawWebSocketClient.frame(.binary, ByteBuffer(repeating: 1, count: 600_000), fin: false),
                    RawWebSocketClient.frame(.continuation, ByteBuffer(repeating: 1, count: 600_000)),
                ],
                1009
            ),
            ([RawWebSocketClient.frame(.ping, ByteBuffer(repeating: 1, count: 126))], 1002),
            ([RawWebSocketClient.frame(.ping, ByteBuffer(string: "p"), fin: false)], 1002),
            ([RawWebSocketClient.frame(WebSocketOpcode(encodedWebSocketOpcode: 11)!, ByteBuffer())], 1002),
        ] as [([WebSocketFrame], UInt16)]
    )
    func failures(frames: [WebSocketFrame], code: UInt16) async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let result = try await Self.exchange(frames, port: server.port)
            #expect(result.frames.isEmpty && result.closeCode == code)
        }
    }

    @Test(
        "close frames: valid codes are echoed; bad codes, one-byte payloads and bad reasons fail",
        arguments: [
            ([0x03, 0xE8], 1000),
            ([0x03, 0xE9, 0x6F, 0x6B], 1001),
            ([0x0B, 0xB8], 3000),
            ([0x13, 0x87], 4999),
            ([], 1000),
            ([0x03], 1002),
            ([0x03, 0xE7], 1002),  // 999
            ([0x03, 0xEC], 1002),  // 1004
            ([0x03, 0xED], 1002),  // 1005
            ([0x03, 0xEE], 1002),  // 1006
            ([0x03, 0xF7], 1002),  // 1015
            ([0x0B, 0xB7], 1002),  // 2999
            ([0x13, 0x88], 1002),  // 5000
            ([0x03, 0xE8, 0xCE, 0xBA, 0xE1, 0xBD, 0xB9, 0xED, 0xA0, 0x80], 1007),  // a surrogate in the reason
        ] as [([UInt8], UInt16)]
    )
    func closeFrames(payload: [UInt8], code: UInt16) async throws {
        try await withServer(Self.echoServerConfiguration()) { server in
            let result = try await Self.exchange([Self.closeFrame(payload)], port: server.port)
            #expect(result.frames.isEmpty && result.closeCode == code)
        }
    }

    // MARK: - Client role

    @Test("our client fails a masked frame from the server with 1002 (and does not answer what follows)")
    func maskedFromServer() async throws {
        let server = try await RawWebSocketServer { _ in nil }
        async let accepted = server.accept()
        let client = try await BLIPRawWebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", subprotocols: [])
        let peer = try await accepted
        let (code, pong) = try await peer.executeThenClose { inbound, outbound -> (UInt16?, Bool) in
            try await outbound.write(contentsOf: [
                WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(string: "masked")),
                WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "p")),
            ])
            for try await frame in inbound {
                switch frame.opcode {
                case .connectionClose:
                    var data = frame.unmaskedData
                    return (data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) }, false)
                case .pong:
                    return (nil, true)
                default:
                    continue
                }
            }
            return (nil, false)
        }
        #expect(code == 1002 && !pong)
        await #expect(throws: BLIPConnectionError.self) { _ = try await client.receive() }
        await server.close()
    }

    @Test("an echoing client echoes on its event loop, fragmented messages reassembled, then closes cleanly")
    func echoingClient() async throws {
        let server = try await RawWebSocketServer { _ in nil }
        async let accepted = server.accept()
        let client = try await BLIPRawWebSocket.connect(
            to: "ws://127.0.0.1:\(server.port)/",
            subprotocols: [],
            echoes: true
        )
        let peer = try await accepted
        let (echoes, code) = try await peer.executeThenClose { inbound, outbound -> ([WebSocketFrame], UInt16?) in
            var closing = ByteBuffer()
            closing.write(webSocketErrorCode: .goingAway)
            try await outbound.write(contentsOf: [
                WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: "one")),
                WebSocketFrame(fin: false, opcode: .binary, data: ByteBuffer(string: "tw")),
                WebSocketFrame(fin: true, opcode: .continuation, data: ByteBuffer(string: "o")),
                WebSocketFrame(fin: true, opcode: .connectionClose, data: closing),
            ])
            var echoes: [WebSocketFrame] = []
            for try await frame in inbound {
                if frame.opcode == .connectionClose {
                    var data = frame.unmaskedData
                    return (echoes, data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) })
                }
                echoes.append(frame)
            }
            return (echoes, nil)
        }
        #expect(echoes.map(\.opcode) == [.text, .binary] && echoes.allSatisfy { $0.maskKey != nil })
        #expect(echoes.map { String(buffer: $0.unmaskedData) } == ["one", "two"])
        #expect(code == 1001 && client.echoedCount == 2)
        await client.waitUntilClosed()
        await server.close()
    }

    @Test("frames that come with the 101 response reach an echoing client at once: echoed before a bad frame fails it")
    func framesWithTheHandshake() async throws {
        // The text "hi", then a frame with the reserved opcode 5, in the same write as the 101 response.
        let server = try await HandWrittenWebSocketServer(frames: [0x81, 0x02, 0x68, 0x69, 0x85, 0x00])
        let client = try await BLIPRawWebSocket.connect(
            to: "ws://127.0.0.1:\(server.port)/",
            subprotocols: [],
            echoes: true
        )
        let frames = try await server.received.futureResult.get()
        #expect(frames.map(\.opcode) == [0x1, 0x8])
        #expect(frames.first?.payload == Array("hi".utf8))
        #expect(frames.last.map { Array($0.payload.prefix(2)) } == [0x03, 0xEA])  // 1002
        await client.waitUntilClosed()
        await server.close()
    }

    @Test("a message the server sends with its close, right after the handshake, still reaches our client")
    func messageThenCloseAtOnce() async throws {
        let server = try await RawWebSocketServer { _ in nil }
        async let accepted = server.accept()
        let client = try await BLIPRawWebSocket.connect(to: "ws://127.0.0.1:\(server.port)/", subprotocols: [])
        let peer = try await accepted
        try await peer.executeThenClose { _, outbound in
            var closing = ByteBuffer()
            closing.write(webSocketErrorCode: .normalClosure)
            try await outbound.write(contentsOf: [
                WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: "301")),
                WebSocketFrame(fin: true, opcode: .connectionClose, data: closing),
            ])
        }
        let first = try await client.receive()
        #expect(first.map { String(buffer: $0.message) } == "301" && first?.isText == true)
        #expect(try await client.receive() == nil)
        await server.close()
    }
}
