import Foundation

@testable import BLIPTool

/// `blip serve` in a child process, started through `sh` so that it can run under a lower file descriptor
/// limit than this test process (which cannot lower its own safely while other tests run).
final class ServerProcess: @unchecked Sendable {  // lets only; Process is safe across threads
    let process = Process()
    let port: Int
    private let log: URL

    /// Whether this system has /proc, where the figures come from.
    static var isSupported: Bool { FileManager.default.fileExists(atPath: "/proc/self/stat") }

    /// The `blip` executable that `swift build` puts beside the test bundle; nil when it was not built.
    static var executable: URL? {
        let tests = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        let candidates = [tests, URL(fileURLWithPath: CommandLine.arguments[0])].map {
            $0.deletingLastPathComponent().appendingPathComponent("blip")
        }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) }
    }

    /// Starts `blip serve --port 0` (or `command`) with at most `fileLimit` descriptors and reads its port
    /// from its first line. `arguments` are added to the command's. `blip proxy` says where it listens on
    /// standard error (its standard output is the traffic log, which then goes to the log file).
    init(
        _ executable: URL,
        fileLimit: Int = 1024,
        command: [String] = ["serve", "--port", "0"],
        arguments: [String] = [],
        announcesOnStandardError: Bool = false
    ) throws {
        self.log = FileManager.default.temporaryDirectory.appendingPathComponent("blip-serve-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: self.log.path, contents: nil)
        self.process.executableURL = URL(fileURLWithPath: "/bin/sh")
        self.process.arguments =
            ["-c", "ulimit -n \(fileLimit) && exec \"$0\" \"$@\"", executable.path] + command + arguments
        // Under `swift test --enable-code-coverage` the child would write its own profile beside the tests'.
        self.process.environment = ProcessInfo.processInfo.environment.merging(["LLVM_PROFILE_FILE": "/dev/null"]) {
            $1
        }
        let output = Pipe()
        if announcesOnStandardError {
            self.process.standardError = output
            self.process.standardOutput = try FileHandle(forWritingTo: self.log)
        } else {
            self.process.standardOutput = output
            self.process.standardError = try FileHandle(forWritingTo: self.log)
        }
        try self.process.run()
        // The first line says where it listens (blip bench --self reads it the same way).
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let port = text.split(separator: ":").last.flatMap({ Int($0.prefix(while: \.isNumber)) }) else {
            self.process.terminate()
            throw CocoaError(.fileReadCorruptFile, userInfo: [NSLocalizedDescriptionKey: "no port in '\(text)'"])
        }
        self.port = port
    }

    var processID: Int32 { self.process.processIdentifier }

    /// Descriptors the process has open now.
    var openFiles: Int {
        (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(self.processID)/fd").count) ?? 0
    }

    /// CPU time the process has used so far (user + system), read as `blip bench` reads its server's.
    var cpuTime: Duration { ProcessCPUTime.of(self.processID) ?? .zero }

    /// Starts the server on a Dispatch thread: starting waits for the child's first line, which would hold one
    /// of the two threads of Swift concurrency on a two-core machine (every suite's tasks share them).
    static func start(
        _ executable: URL,
        fileLimit: Int = 1024,
        command: [String] = ["serve", "--port", "0"],
        arguments: [String] = [],
        announcesOnStandardError: Bool = false
    ) async throws -> ServerProcess {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                continuation.resume(
                    with: Result {
                        try ServerProcess(
                            executable,
                            fileLimit: fileLimit,
                            command: command,
                            arguments: arguments,
                            announcesOnStandardError: announcesOnStandardError
                        )
                    }
                )
            }
        }
    }

    /// Stops the server on a Dispatch thread (for the same reason) and returns what it logged.
    func stopped() async -> String {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async { continuation.resume(returning: self.stop()) }
        }
    }

    /// Stops the server and returns what it logged; blocks until it has exited.
    func stop() -> String {
        if self.process.isRunning {
            self.process.terminate()
            self.process.waitUntilExit()
        }
        defer { try? FileManager.default.removeItem(at: self.log) }
        return (try? String(contentsOf: self.log, encoding: .utf8)) ?? ""
    }
}
