internal import ArgumentParser
internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore
internal import Synchronization

/// Two BLIP peers talking over a real loopback WebSocket, in one process.
struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run a server and a client on a loopback port and walk through a short BLIP session.",
        discussion: "Exit status 0 only if every step behaved as expected."
    )

    struct Step {
        var name: String
        var passed: Bool
        var time: Duration
        var detail: String
    }

    @Flag(help: "Serve a page that shows this process and a browser exchanging messages live.") var web = false
    @Option(help: "With --web: the port to serve on (0 picks a free one).") var port = 4986
    @Option(help: "With --web: stop after this many seconds (default: run until interrupted).") var seconds: Double?

    func validate() throws {
        if let seconds = self.seconds, !(seconds > 0 && seconds <= 86_400) {
            throw ValidationError("--seconds is more than 0 and at most 86 400")
        }
        if (self.seconds != nil || self.port != 4986) && !self.web {
            throw ValidationError("--port and --seconds go with --web")
        }
    }

    func run() async throws {
        if self.web {
            return try await WebDemo(port: self.port, duration: self.seconds.map { .milliseconds(Int64($0 * 1000)) })
                .run()
        }
        var logger = Logger(label: "blip.demo")
        logger.logLevel = .warning
        let notes = AsyncStream.makeStream(of: String.self)
        let profiles = StandardProfiles()
        var router = BLIPRouter()
        router.register(profiles)
        router.register(profile: "note") { request, _ in
            notes.continuation.yield(String(buffer: request.body))
            return BLIPResponse()
        }
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router, logger: logger)
        async let serving: Void = server.run()
        let url = "ws://127.0.0.1:\(server.port)/db/_blipsync"
        print("BLIP demo: a server on \(url), a client connecting to it")

        let steps: [Step]
        do {
            steps = try await BLIPWebSocketClient.connect(to: url, logger: logger) { connection in
                var steps: [Step] = []
                steps.append(
                    await Self.measure("subprotocol") {
                        (connection.dialect == .blip3, "BLIP_3+CBMobile_3 negotiated, dialect \(connection.dialect)")
                    }
                )
                steps.append(
                    await Self.measure("request/response") {
                        let reply = try await connection.sendRequest(
                            BLIPRequest(
                                profile: "echo",
                                properties: ["Content-Type": "text/plain", "X-Demo": "1"],
                                text: "Hello, BLIP!"
                            )
                        )
                        let ok = String(buffer: reply.body) == "Hello, BLIP!" && reply.properties["X-Demo"] == "1"
                        return (
                            ok, "echo: \(reply.properties.count) properties, body \"\(String(buffer: reply.body))\""
                        )
                    }
                )
                steps.append(
                    await Self.measure("no-reply request") {
                        try await connection.sendNoReply(BLIPRequest(profile: "note", text: "fire and forget"))
                        var iterator = notes.stream.makeAsyncIterator()
                        let seen = await iterator.next()
                        return (seen == "fire and forget", "handler got \"\(seen ?? "")\", no reply sent")
                    }
                )
                steps.append(
                    await Self.measure("error reply") {
                        do {
                            _ = try await connection.sendRequest(
                                BLIPRequest(
                                    profile: "error",
                                    properties: ["Want-Error-Code": "409", "Want-Error-Message": "conflict"]
                                )
                            )
                            return (false, "no error")
                        } catch let error as BLIPError {
                            return (
                                error.domain == .http && error.code == 409,
                                "ERR \(error.domain)/\(error.code): \(error.message)"
                            )
                        }
                    }
                )
                steps.append(
                    await Self.measure("compressed JSON") {
                        let json = BenchmarkData.text(1 << 20)
                        let before = connection.statistics.bytesSent
                        let reply = try await connection.sendRequest(
                            BLIPRequest(profile: "sink", body: json, compressed: true)
                        )
                        let wire = connection.statistics.bytesSent - before
                        let ok = reply.properties["Count"] == "\(json.readableBytes)" && wire * 3 < json.readableBytes
                        return (ok, "\(json.readableBytes) bytes of JSON sent as \(wire) bytes on the wire")
                    }
                )
                steps.append(
                    await Self.measure("urgent overtakes 16 MiB") {
                        let bulkDone = Atomic<Bool>(false)
                        let start = connection.statistics.bytesSent
                        let bulk = Task {
                            defer { bulkDone.store(true, ordering: .releasing) }
                            return try await connection.sendRequest(
                                BLIPRequest(profile: "sink", body: BenchmarkData.random(16 << 20))
                            )
                        }
                        let deadline = ContinuousClock.now + .seconds(10)
                        while connection.statistics.bytesSent - start < 1 << 20 && ContinuousClock.now < deadline {
                            try await Task.sleep(for: .microseconds(200))
                        }
                        let started = ContinuousClock.now
                        _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "urgent", urgent: true))
                        let urgentTime = ContinuousClock.now - started
                        let overtook = !bulkDone.load(ordering: .acquiring)
                        let reply = try await bulk.value
                        let total = ContinuousClock.now - started
                        let ok = overtook && reply.properties["Count"] == "\(16 << 20)"
                        return (
                            ok,
                            String(
                                format: "urgent reply in %.1f ms while the 16 MiB transfer took %.0f ms",
                                urgentTime.seconds * 1000,
                                total.seconds * 1000
                            )
                        )
                    }
                )
                return steps
            }
        } catch {
            await server.close()
            await serving
            throw error
        }
        await server.close()
        await serving

        print("")
        print("  step                      result   time        what happened")
        for step in steps {
            print(
                "  \(step.name.padding(toLength: 24, withPad: " ", startingAt: 0))  \(step.passed ? "ok  " : "FAIL")  "
                    + String(format: "%8.2f ms", step.time.seconds * 1000) + "   \(step.detail)"
            )
        }
        let failed = steps.filter { !$0.passed }.count
        print("")
        print(failed == 0 ? "all \(steps.count) steps behaved as expected" : "\(failed) of \(steps.count) steps failed")
        if failed > 0 { throw ExitCode(1) }
    }

    static func measure(_ name: String, _ body: () async throws -> (Bool, String)) async -> Step {
        let started = ContinuousClock.now
        do {
            let (passed, detail) = try await body()
            return Step(name: name, passed: passed, time: ContinuousClock.now - started, detail: detail)
        } catch {
            return Step(name: name, passed: false, time: ContinuousClock.now - started, detail: "\(error)")
        }
    }
}
