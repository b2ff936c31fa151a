import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// `blip serve` out of file descriptors: run under `ulimit -n 256`, it is sent more idle TCP connections
/// than it can accept.
@Suite(
    "blip serve out of file descriptors",
    .enabled(if: ServerProcess.isSupported, "reads the server's figures from /proc"),
    .timeLimit(.minutes(2))
)
struct FileDescriptorLimitTests {
    static let fileLimit = 256

    @Test("it pauses accepting instead of spinning, logs that once, and serves again once descriptors are freed")
    func acceptBacksOff() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let server = try ServerProcess(executable, fileLimit: Self.fileLimit)
        defer { _ = server.stop() }

        // More connections than descriptors: the kernel completes them all (the rest wait in the listen
        // backlog of 128), the server takes what it can, then accept fails with EMFILE. All are awaited at
        // once: while other suites keep the cooperative pool busy, each await can take a third of a second.
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let address = try SocketAddress(ipAddress: "127.0.0.1", port: server.port)
        let connecting = (0..<(Self.fileLimit + 64)).map { _ in
            ClientBootstrap(group: loop).connect(to: address)
        }
        let idle = try await EventLoopFuture.whenAllSucceed(connecting, on: loop).get()
        // Another process's descriptors give no event to wait for: look every 20 ms, for at most 30 s.
        let deadline = ContinuousClock.now + .seconds(30)
        while server.openFiles < Self.fileLimit && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        try #require(server.openFiles >= Self.fileLimit, "the server never ran out of descriptors")

        // Its own CPU time (not this machine's load) over two seconds of wall time.
        let wallStart = ContinuousClock.now
        let cpuStart = server.cpuTime
        try await Task.sleep(for: .seconds(2))
        let share = (server.cpuTime - cpuStart) / (ContinuousClock.now - wallStart)
        #expect(share < 0.15, "out of descriptors, the server used \(Int(share * 100)) % of a core")

        for channel in idle { channel.close(promise: nil) }
        try await EventLoopFuture.andAllComplete(idle.map(\.closeFuture), on: loop).get()
        // The freed descriptors go to the connections still waiting in the backlog (closed by now); a new
        // client is accepted after them.
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "back"))
            #expect(String(buffer: reply.body) == "back")
        }
        let warnings = server.stop().split(separator: "\n").filter { $0.contains("accepting connections failed") }
        #expect((1...2).contains(warnings.count), "rate-limited warnings:\n\(warnings.joined(separator: "\n"))")
    }
}
