import Foundation
import Testing

/// `blip request --body-file` streams its body: the file, a pipe or standard input is read a piece at a
/// time as the connection sends it, so the tool's memory stays small whatever the body's size. Before, the
/// whole file was read into memory first (a 256 MiB body took more than 256 MiB).
@Suite("blip request --body-file streams", .timeLimit(.minutes(5)))
struct BodyFileStreamingTests {
    /// Larger than the memory bound, so that reading the body whole cannot pass.
    static let bodySize = 256 << 20
    /// The most the tool may hold resident at its peak, everything included.
    static let residentBound = 64 << 20

    @Test("a 256 MiB file and a 256 MiB pipe are sent whole in less than 64 MiB of memory")
    func streamsFileAndPipe() async throws {
        let executable = try #require(ServerProcess.executable, "build the blip product first")
        let server = try await ServerProcess.start(
            executable,
            arguments: ["--max-incoming-message-size", "\(1 << 30)"]
        )
        defer { _ = server.stop() }
        let url = "ws://127.0.0.1:\(server.port)/"
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("body-file-\(UUID())")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("body.bin")
        #expect(FileManager.default.createFile(atPath: file.path, contents: nil))
        let handle = try FileHandle(forWritingTo: file)
        try handle.truncate(atOffset: UInt64(Self.bodySize))  // sparse: read back as zeros
        try handle.close()

        // The sink profile answers with the byte count it read; the child's peak resident size comes from
        // getrusage once it has been waited for.
        let blip = executable.path
        let fromFile = try await Self.peakResident(
            "\"$0\" request \(url) --profile sink --timeout 240 --body-file \(file.path)",
            blip
        )
        let fromPipe = try await Self.peakResident(
            "head -c \(Self.bodySize) /dev/zero | \"$0\" request \(url) --profile sink --timeout 240 --body-file -",
            blip
        )
        for (route, run) in [("file", fromFile), ("pipe", fromPipe)] {
            #expect(run.status == 0, "\(route): \(run.output)")
            #expect(run.output.contains("Count: \(Self.bodySize)"), "\(route): \(run.output)")
            #expect(run.peak > 0 && run.peak < Self.residentBound, "\(route): peak \(run.peak) bytes")
        }
    }

    @Test("--timeout ends a request whose body pipe never writes: the read that blocks does not hold it")
    func timeoutWhileThePipeIsSilent() async throws {
        let executable = try #require(ServerProcess.executable, "build the blip product first")
        let server = try await ServerProcess.start(executable)
        defer { _ = server.stop() }
        // A FIFO this test holds open for writing and never writes to: the tool's read of it blocks until
        // the test closes it (a `sleep | blip` pipeline would leave its writer holding the output pipe).
        let fifo = FileManager.default.temporaryDirectory.appendingPathComponent("silent-\(UUID()).fifo").path
        try #require(mkfifo(fifo, 0o600) == 0)
        defer { unlink(fifo) }
        let writer = open(fifo, O_RDWR)
        try #require(writer >= 0)
        defer { close(writer) }
        let started = ContinuousClock.now
        let run = try await WrongInvocationTests.offThePoolRun(
            [
                executable.path, "request", "ws://127.0.0.1:\(server.port)/", "--profile", "sink", "--timeout", "2",
                "--body-file", fifo,
            ],
            limit: 90
        )
        let elapsed = ContinuousClock.now - started
        // The body stopped after the request's first frame left: BLIP cannot abort a message, so the
        // connection closes (1011) and the request fails with it.
        #expect(run.status == 1, "\(run.text)")
        #expect(run.text.contains("blip: "), "\(run.text)")
        #expect(elapsed < .seconds(30), "took \(elapsed)")
    }

    /// Runs `script` under bash (with `$0` set to `argument`) from a Python parent that reports the peak
    /// resident size of its waited-for children: the tool's own peak (`head` and bash stay far smaller).
    static func peakResident(
        _ script: String,
        _ argument: String
    ) async throws -> (status: Int32, output: String, peak: Int) {
        let parent = """
            import resource, subprocess, sys
            run = subprocess.run(["/bin/bash", "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, \
            stderr=subprocess.STDOUT)
            sys.stdout.write(run.stdout.decode(errors="replace"))
            print("peak-kib %d" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
            sys.exit(run.returncode)
            """
        let run = try await WrongInvocationTests.offThePoolRun(
            ["/usr/bin/python3", "-c", parent, script, argument],
            limit: 280
        )
        let peakLine = run.text.split(separator: "\n").last { $0.hasPrefix("peak-kib ") }
        let peak = peakLine.flatMap { Int($0.dropFirst("peak-kib ".count)) }.map { $0 * 1024 } ?? 0
        return (run.status, run.text, peak)
    }
}
