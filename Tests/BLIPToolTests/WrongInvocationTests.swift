import Foundation
import Testing

/// What the tool says when it is used wrongly or cannot do its work: one line, `blip: ` and then the flag,
/// value, endpoint, file or port and what is wrong, in plain words; exit status 64 for a usage error and 1
/// for a failure at run time (a JSON object on standard output with `--json`). Before, these said things
/// such as `Error Domain=NSCocoaErrorDomain Code=260`, `connection reset (error set): Connection refused)
/// (errno: 111))`, "not a ws:// or wss:// URL" for port 99999, or exited 0 for `bench --count 0`.
@Suite("Wrong invocations of the blip tool", .timeLimit(.minutes(3)))
struct WrongInvocationTests {
    /// One invocation: its arguments, with `BUSY` standing for a port a server listens on, and the exit
    /// status and whole output (both streams) expected.
    struct Case: Sendable, CustomTestStringConvertible {
        let arguments: [String]
        let status: Int32
        let output: String

        init(_ arguments: [String], _ status: Int32, _ output: String) {
            self.arguments = arguments
            self.status = status
            self.output = output
        }

        var testDescription: String { "blip " + self.arguments.joined(separator: " ") }
    }

    /// Nothing listens on port 1 of the loopback address: a connection there is refused.
    static let refused = "ws://127.0.0.1:1/"

    static let cases: [Case] = [
        Case(["no-such-command"], 64, "blip: Unexpected argument 'no-such-command'"),
        Case(["request"], 64, "blip: Missing expected argument '<url>'"),
        Case(
            ["request", "http://127.0.0.1:1/", "--profile", "echo"],
            64,
            "blip: <url>: 'http://127.0.0.1:1/' is not a ws:// or wss:// URL"
        ),
        Case(
            ["request", "ws://127.0.0.1:99999/", "--profile", "echo"],
            64,
            "blip: <url>: the port of ws://127.0.0.1:99999/ must be 1 to 65535, not '99999'"
        ),
        Case(["request", "ws://:80/", "--profile", "echo"], 64, "blip: <url>: ws://:80/ has no host"),
        Case(
            ["request", refused, "--profile", "echo"],
            1,
            "blip: could not connect to ws://127.0.0.1:1/: connection refused"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--json"],
            1,
            #"{"error":"could not connect to ws://127.0.0.1:1/: connection refused","type":"failure"}"#
        ),
        Case(
            ["request", refused, "--profile", "echo", "--body", "x", "--body-file", "f"],
            64,
            "blip: --body and --body-file exclude each other"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--body-file", "/nonexistent/file"],
            1,
            "blip: cannot read --body-file /nonexistent/file: no such file"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--body-file", "/"],
            1,
            "blip: cannot read --body-file /: it is a folder"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--prop", "novalue"],
            64,
            "blip: --prop takes KEY=VALUE, not 'novalue'"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--header", "NoColon"],
            64,
            "blip: --header takes 'Name: value', not 'NoColon'"
        ),
        Case(["request", refused, "--profile", "echo", "--user", "alice"], 64, "blip: --user takes USER:PASS"),
        Case(
            ["request", refused, "--profile", "echo", "--timeout", "0"],
            64,
            "blip: --timeout takes seconds, more than 0 and at most 86400"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--timeout", "abc"],
            64,
            "blip: The value 'abc' is invalid for '--timeout <timeout>'"
        ),
        Case(
            ["request", refused, "--profile", "echo", "--pin-sha256", "abc"],
            64,
            "blip: --pin-sha256 takes 64 hex digits"
        ),
        Case(["bench", "--workload", "rt"], 64, "blip: give the server's URL, or --self to start one"),
        Case(["bench", refused, "--self"], 64, "blip: give the server's URL or --self, not both"),
        Case(["bench", "--self", "--count", "0"], 64, "blip: --count takes 1 or more, not 0"),
        Case(["bench", "--self", "--compression-level", "12"], 64, "blip: --compression-level is 0 to 9"),
        Case(
            ["bench", "--self", "--workload", "nope"],
            64,
            "blip: The value 'nope' is invalid for '--workload <workload>'. It takes one of: rt, pipelined, bulk, "
                + "urgent, all, idle, fanin, in-memory, stream, stream-reply."
        ),
        Case(["bench", "--via", "tcp://x", refused], 64, "blip: --via: 'tcp://x' is not a ws:// or wss:// URL"),
        Case(["serve", "--port", "70000"], 64, "blip: --port takes 0 to 65535, not 70000"),
        Case(["serve", "--port", "BUSY"], 1, "blip: cannot listen on 127.0.0.1:BUSY: address already in use"),
        Case(["serve", "--tls-cert", "c.pem"], 64, "blip: --tls-cert and --tls-key go together"),
        Case(
            ["serve", "--require-basic", "alice"],
            64,
            "blip: --require-basic is user:password, with a non-empty user name and no colon in it"
        ),
        Case(["serve", "--max-connections", "0"], 64, "blip: --max-connections is at least 1"),
        Case(["session", "ftp://x/"], 64, "blip: <url>: 'ftp://x/' is not a ws:// or wss:// URL"),
        Case(["decode"], 64, "blip: give frame files, a folder, --hex or '-'"),
        Case(["decode", "--hex", "zz"], 64, "blip: not hex: zz"),
        Case(["decode", "/nonexistent/frame.bin"], 1, "blip: cannot read /nonexistent/frame.bin: no such file"),
        Case(["proxy", "--upstream", "http://x"], 64, "blip: --upstream: 'http://x' is not a ws:// or wss:// URL"),
        Case(
            ["proxy", "--upstream", refused, "--listen", "nocolon"],
            64,
            "blip: --listen takes HOST:PORT with a port of 0 to 65535, not 'nocolon'"
        ),
        Case(
            ["request", "wss://127.0.0.1:BUSY/", "--profile", "echo"],
            1,
            "blip: TLS with wss://127.0.0.1:BUSY/ failed: the server did not answer in TLS (is it a ws:// endpoint?)"
        ),
        Case(["autobahn-client", "--url", "http://x"], 64, "blip: --url: 'http://x' is not a ws:// or wss:// URL"),
        Case(
            ["autobahn-client", "--url", "ws://127.0.0.1:1"],
            1,
            "blip: could not connect to ws://127.0.0.1:1/getCaseCount: connection refused"
        ),
        Case(["demo", "--port", "1"], 64, "blip: --port and --seconds go with --web"),
    ]

    @Test("each says what is wrong in one line, with exit status 64 (usage) or 1 (at run time)")
    func table() async throws {
        let executable = try #require(ServerProcess.executable, "build the blip product first")
        let busy = try await ServerProcess.start(executable)
        defer { _ = busy.stop() }
        for testCase in Self.cases {
            let arguments = testCase.arguments.map { $0.replacingOccurrences(of: "BUSY", with: "\(busy.port)") }
            let run = try #require(
                try await EntryPointTests.run(arguments, waits: false, limit: 30),
                "\(testCase.testDescription) did not end"
            )
            let expected = testCase.output.replacingOccurrences(of: "BUSY", with: "\(busy.port)") + "\n"
            #expect(run.status == testCase.status, "\(testCase.testDescription): \(run.output)")
            #expect(run.output == expected, "\(testCase.testDescription)")
        }
        #expect(Self.cases.count >= 25)
    }

    @Test("--body-file reads pipes and process substitutions, not only regular files")
    func bodyFromPipes() async throws {
        let executable = try #require(ServerProcess.executable, "build the blip product first")
        let server = try await ServerProcess.start(executable)
        defer { _ = server.stop() }
        let blip = executable.path
        let url = "ws://127.0.0.1:\(server.port)/"
        // /dev/stdin fed by a pipe, and a process substitution (a /dev/fd path): neither has a size to read
        // up front (both failed before with "You don't have permission").
        let script = """
            printf 'from a pipe' | "$0" request \(url) --profile echo --timeout 10 --body-file /dev/stdin && \
            exec bash -c '"$0" request \(url) --profile echo --timeout 10 --body-file <(printf "from a substitution")' "$0"
            """
        let output = try await Self.offThePoolRun(["/bin/bash", "-c", script, blip])
        #expect(output.status == 0, "\(output.text)")
        #expect(output.text.contains("from a pipe") && output.text.contains("from a substitution"), "\(output.text)")
    }

    /// Runs `arguments` to their end on a Dispatch thread (killed after `limit` seconds); status and both
    /// streams.
    static func offThePoolRun(_ arguments: [String], limit: Double = 60) async throws -> (status: Int32, text: String) {
        try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                let process = Process()
                process.executableURL = URL(fileURLWithPath: arguments[0])
                process.arguments = Array(arguments.dropFirst())
                var environment = ProcessInfo.processInfo.environment
                environment["LLVM_PROFILE_FILE"] = "/dev/null"
                process.environment = environment
                let pipe = Pipe()
                process.standardOutput = pipe
                process.standardError = pipe
                do { try process.run() } catch { return continuation.resume(throwing: error) }
                let killer = DispatchWorkItem { kill(process.processIdentifier, SIGKILL) }
                DispatchQueue.global().asyncAfter(deadline: .now() + limit, execute: killer)
                let data = pipe.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                killer.cancel()
                continuation.resume(returning: (process.terminationStatus, String(decoding: data, as: UTF8.self)))
            }
        }
    }
}
