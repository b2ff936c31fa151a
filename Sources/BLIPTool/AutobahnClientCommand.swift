internal import ArgumentParser
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore

/// `blip autobahn-client`: the client side of Autobahn|Testsuite (`wstest -m fuzzingserver`). It asks the
/// fuzzing server how many cases it has, runs each one by echoing every message back through
/// `BLIPRawWebSocket` (the handler, framing and word-wide masking that BLIP clients use, with the echo
/// done on the event loop), then asks the server to write its reports. Hidden: `.ci/autobahn.sh` runs it.
struct AutobahnClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "autobahn-client",
        abstract: "Run the cases of an Autobahn|Testsuite fuzzing server, echoing every message.",
        shouldDisplay: false
    )

    @Option(help: "The fuzzing server's URL.") var url = "ws://127.0.0.1:9001"
    @Option(help: "The agent name in the reports.") var agent = "swift-blip"
    @Option(name: .customLong("case"), help: "Run only this case, by number from 1 (repeatable).")
    var cases: [Int] = []
    @Option(help: "Seconds a case may take before the client closes it.") var caseTimeout = 60
    @Option(help: "Largest WebSocket message accepted, in bytes.") var maxMessageSize = 1 << 25

    func validate() throws {
        try WebSocketURLArgument.check(self.url, as: "--url")
        guard self.caseTimeout > 0 else { throw ValidationError("--case-timeout must be positive") }
    }

    func run() async throws {
        let base = self.url.hasSuffix("/") ? String(self.url.dropLast()) : self.url
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        let agent = self.agent.addingPercentEncoding(withAllowedCharacters: allowed) ?? "swift-blip"
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.maximumMessageSize = self.maxMessageSize
        configuration.heartbeatInterval = nil
        var logger = Logger(label: "blip.autobahn")
        logger.logLevel = .warning

        let counter = try await Self.connect(to: "\(base)/getCaseCount", configuration, logger)
        let reply = try await counter.receive()
        await counter.waitUntilClosed()
        guard let reply, reply.isText, let count = Int(String(buffer: reply.message)), count >= 0 else {
            throw ValidationError("the fuzzing server did not send its case count")
        }
        let cases = self.cases.isEmpty ? Array(0...count).dropFirst() : self.cases[...]
        print("autobahn-client: \(count) cases on the server, running \(cases.count)")
        for number in cases {
            let started = ContinuousClock.now
            let echoed: Int
            do {
                let socket = try await Self.connect(
                    to: "\(base)/runCase?case=\(number)&agent=\(agent)",
                    echoes: true,
                    configuration,
                    logger
                )
                echoed = await Self.echo(socket, timeout: .seconds(self.caseTimeout))
            } catch {
                print("autobahn-client: case \(number): \(error)")
                continue
            }
            print("autobahn-client: case \(number): \(echoed) messages echoed in \(ContinuousClock.now - started)")
        }
        let reports = try await Self.connect(to: "\(base)/updateReports?agent=\(agent)", configuration, logger)
        await reports.waitUntilClosed()
        print("autobahn-client: reports updated")
    }

    static func connect(
        to url: String,
        echoes: Bool = false,
        _ configuration: BLIPWebSocketClient.Configuration,
        _ logger: Logger
    ) async throws -> BLIPRawWebSocket {
        try await BLIPRawWebSocket.connect(
            to: url,
            subprotocols: [],
            echoes: echoes,
            configuration: configuration,
            logger: logger
        )
    }

    /// Lets the socket echo every message (it does so on its event loop) until the connection closes, or
    /// closes it after `timeout`; returns once the socket has closed, with the number of messages echoed.
    static func echo(_ socket: BLIPRawWebSocket, timeout: Duration) async -> Int {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await socket.waitUntilClosed() }
            group.addTask {
                guard (try? await Task.sleep(for: timeout)) != nil else { return }
                socket.close()  // the connection then closes (within the handler's close timeout)
            }
            await group.next()
            group.cancelAll()
        }
        return socket.echoedCount
    }
}
