import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import NIOWebSocket
import Testing

/// A peer flooding pings must not hold the server's event loop: its pings of one read batch get one pong
/// (the latest, as RFC 6455 5.5.3 allows), and its reads are made small while it floods, so that the loop's
/// other connections and new handshakes get their turn.
@Suite("Floods of tiny frames", .timeLimit(.minutes(2)))
struct FloodFairnessTests {
    /// One masked ping frame with `payload`.
    static func ping(_ payload: String) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: ByteBuffer(string: payload))
    }

    @Test("2 000 pings written at once get a fraction of the pongs, the last one answering the last ping")
    func pongsCoalesce() async throws {
        try await withServer { server in
            let client = try await RawWebSocketClient.connect(port: server.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let pongs = try await client.channel.executeThenClose { inbound, outbound -> Int in
                try await outbound.write(contentsOf: (0..<2_000).map { Self.ping("\($0)") } + [Self.ping("last")])
                var pongs = 0
                for try await frame in inbound where frame.opcode == .pong {
                    pongs += 1
                    if String(buffer: frame.data) == "last" { break }
                }
                return pongs
            }
            // At most 16 pongs and the latest per read batch, against one per ping before (2 001).
            print("flood: \(pongs) pongs for 2 001 pings written at once")
            #expect(pongs >= 1 && pongs <= 1_000, "\(pongs) pongs for 2 001 pings")
        }
    }

    @Test("ten pings at once get ten pongs, in order; pings written with a close are answered before the close")
    func pingsAnsweredInOrder() async throws {
        try await withServer { server in
            let client = try await RawWebSocketClient.connect(port: server.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let frames = try await client.channel.executeThenClose { inbound, outbound -> [WebSocketFrame] in
                // As Autobahn's case 2.10 does: ten pings in one write. Then twenty pings and a close in one.
                try await outbound.write(contentsOf: (0..<10).map { Self.ping("\($0)") })
                var frames: [WebSocketFrame] = []
                var iterator = inbound.makeAsyncIterator()
                while frames.count < 10, let frame = try await iterator.next() { frames.append(frame) }
                try await outbound.write(
                    contentsOf: (0..<20).map { Self.ping("c\($0)") } + [
                        WebSocketFrame(
                            fin: true,
                            opcode: .connectionClose,
                            maskKey: .random(),
                            data: ByteBuffer(bytes: [0x03, 0xE8])
                        )
                    ]
                )
                while let frame = try await iterator.next() {
                    frames.append(frame)
                    if frame.opcode == .connectionClose { break }
                }
                return frames
            }
            let pongs = frames.filter { $0.opcode == .pong }.map { String(buffer: $0.data) }
            #expect(Array(pongs.prefix(10)) == (0..<10).map { "\($0)" })
            // Twenty pings and a close in one write: at most 16 answered one by one, then the latest, and the
            // latest before the close (it was dropped before, when the close came in the same read).
            let late = pongs.dropFirst(10).compactMap { Int($0.dropFirst()) }
            #expect(late == late.sorted() && Set(late).count == late.count, "\(pongs)")
            #expect(late.last == 19 && late.count >= 16, "\(pongs)")
            #expect(frames.last?.opcode == .connectionClose)
        }
    }

    static let floodScript = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Support/ping_flood.py")

    static let timerScript = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Support/handshake_timer.py")

    /// A `ping_flood.py` against `port`, in its own process (a flood from this process's tasks would hold the
    /// cooperative pool, and one from its event loops would share the server's), with its output in a file.
    static func startFlood(port: Int) throws -> (Process, URL) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("blip-flood-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let output = try FileHandle(forWritingTo: log)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", floodScript.path, "\(port)", "60"]
        process.standardOutput = output
        process.standardError = output
        try process.run()
        return (process, log)
    }

    @Test("four peers flooding pings: new handshakes on the same server still complete promptly")
    func handshakesDuringFlood() async throws {
        // The server gets event loops of its own: what is measured is fairness among its connections, and
        // the floods would otherwise delay every other suite's connections on the shared loops.
        let loops = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        defer { loops.shutdownGracefully { _ in } }
        try await withServer(eventLoopGroup: loops) { server in
            var floods: [(Process, URL)] = []
            defer {
                // SIGKILL: a child inherits the test process's ignored SIGTERM.
                for (process, log) in floods {
                    if process.isRunning { kill(process.processIdentifier, SIGKILL) }
                    try? FileManager.default.removeItem(at: log)
                }
            }
            for _ in 0..<4 { floods.append(try Self.startFlood(port: server.port)) }
            for (_, log) in floods {
                // Each flooder's own handshake is one the floods before it must let through.
                for _ in 0..<500 where !Self.read(log).contains("flooding") {
                    try await Task.sleep(for: .milliseconds(10))
                }
                try #require(Self.read(log).contains("flooding"), "the flood did not start: \(Self.read(log))")
            }
            try await Task.sleep(for: .milliseconds(300))
            // Timed by a process of its own: the figure is the server's, not this busy process's.
            let timer = Process()
            timer.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            timer.arguments = ["python3", Self.timerScript.path, "\(server.port)", "12"]
            let output = Pipe()
            timer.standardOutput = output
            try timer.run()
            let lines = try await offThePool { () -> [String] in
                let killer = DispatchWorkItem { kill(timer.processIdentifier, SIGKILL) }
                DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: killer)
                defer { killer.cancel() }
                let data = output.fileHandleForReading.readDataToEndOfFile()
                timer.waitUntilExit()
                return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
            }
            for (process, log) in floods {
                #expect(process.isRunning, "a flood stopped early: \(Self.read(log))")
            }
            let times = lines.compactMap(Double.init).sorted()
            #expect(times.count == 12, "\(lines)")
            guard !times.isEmpty else { return }
            let p50 = times[times.count / 2]
            let p99 = times[min(times.count - 1, times.count * 99 / 100)]
            print("flood: handshakes beside 4 ping floods (debug build): p50 \(p50) ms, p99 \(p99) ms")
            // Before reads were bounded, a debug build took 1.9 s (p50) and 2.9 s (p99) here, and the fourth
            // flooder's own handshake sometimes did not complete in 5 s (checked above); now 0.23 s and 0.28 s
            // with this suite alone (a release build: 12-14 ms at p99, against 2 s before).
            #expect(p50 < 1_000 && p99 < 5_000)
        }
    }

    static func read(_ log: URL) -> String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }
}
