import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// `blip serve` out of file descriptors: run under `ulimit -n 256`, it is sent more idle TCP connections
/// than it can accept. They are held by another process (python3): held here, beside the sockets of every
/// suite running meanwhile, they ran this process out of descriptors under a limit of 1024.
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
        let server = try await ServerProcess.start(executable, fileLimit: Self.fileLimit)
        defer { _ = server.stop() }  // at once if the test failed before the end; a no-op otherwise
        let idleFiles = server.openFiles

        // More connections than descriptors: the kernel completes them all (the rest wait in the listen
        // backlog of 128), the server takes what it can, then accept fails with EMFILE.
        let idle = try IdleConnections(port: server.port, count: Self.fileLimit + 64)
        defer { idle.close() }
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

        idle.close()
        for _ in 0..<1_500 where idle.isOpen { try await Task.sleep(for: .milliseconds(20)) }
        try #require(!idle.isOpen, "the process holding the connections did not end")
        // The freed descriptors go to the connections still waiting in the backlog (closed by now): the
        // server takes each, finds it closed and lets it go. Once it holds few descriptors again, a new
        // client is served. (Connecting while it still drained the backlog, a client once saw its
        // connection closed during the handshake.)
        for _ in 0..<1_500 where server.openFiles > idleFiles + 8 { try await Task.sleep(for: .milliseconds(20)) }
        try #require(
            server.openFiles <= idleFiles + 8,
            "the server kept \(server.openFiles) descriptors, \(idleFiles) idle"
        )
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.connectTimeout = .seconds(60)  // beside every other suite and stress-ng, 10 s passed
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: configuration) {
            connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "back"))
            #expect(String(buffer: reply.body) == "back")
        }
        let warnings = await server.stopped().split(separator: "\n").filter {
            $0.contains("accepting connections failed")
        }
        #expect((1...2).contains(warnings.count), "rate-limited warnings:\n\(warnings.joined(separator: "\n"))")
    }
}

/// Idle TCP connections held open by a python3 process until ``close()``, which closes its standard input
/// (a signal may find it blocked: it inherits this process's signal mask).
final class IdleConnections: Sendable {
    private let process: Process
    private let input = Pipe()
    private static let script = """
        import socket, sys
        held = [socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=60) for _ in range(int(sys.argv[2]))]
        sys.stdin.read()
        """

    init(port: Int, count: Int) throws {
        self.process = Process()
        self.process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        self.process.arguments = ["python3", "-c", Self.script, "\(port)", "\(count)"]
        self.process.standardInput = self.input  // also ends it if this process dies first
        try self.process.run()
    }

    var isOpen: Bool { self.process.isRunning }

    func close() {
        try? self.input.fileHandleForWriting.close()
    }
}
