internal import ArgumentParser
internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

struct SessionCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "session",
        abstract: "Keep a reconnecting session to a server, sending echo requests at an interval.",
        discussion: """
            Prints each change of the session's state (connecting, connected, waiting, stopped) and, at the \
            end (after --count requests, or on SIGINT or SIGTERM), a summary: requests sent, replied, failed as \
            transient (the connection ended under them) or permanent, reconnections, and the longest gap \
            without a connection. Exit status: 0 when every request was replied or failed as transient, 1 \
            otherwise.
            """
    )

    @Argument(help: "ws:// or wss:// URL.") var url: String
    @Option(help: "Requests to send, then stop (default: until interrupted).") var count: Int?
    @Option(help: "Milliseconds between requests.") var interval = 100
    @Option(
        help: """
            Instead of one request per interval, send --count requests back to back with this many in flight             (in order), going on over the next connection when one ends.
            """
    )
    var inFlight: Int?
    @Option(help: "After the requests, send one message of this many bytes to `sink`, again until it gets through.")
    var bulk: Int?
    @Option(help: "Seconds a request may wait for its reply; then it fails as transient.") var timeout = 10.0
    @Option(help: "Body bytes of each echo request.") var size = 100
    @Option(help: "Longest wait between attempts, in milliseconds (the backoff doubles from 100 ms up to it).")
    var maxDelay = 5_000
    @Option(help: "Seconds between keepalive pings when nothing is received (0: none).") var heartbeat = 5.0
    @Option(help: "Seconds a connection attempt (TCP, TLS and the handshake) may take.") var connectTimeout = 10.0
    @Option(name: .customLong("subprotocol"), help: "Subprotocol to offer (repeatable, preferred first).")
    var subprotocols: [String] = []
    @Option(help: "Credentials as USER:PASS, sent as Authorization: Basic.") var user: String?
    @OptionGroup var reach: ClientReachOptions
    @Flag(help: "Print state changes and the summary as JSON lines.") var json = false

    func validate() throws {
        if let count = self.count, count < 1 { throw ValidationError("--count takes 1 or more") }
        if !(1...3_600_000).contains(self.interval) { throw ValidationError("--interval takes 1 to 3600000 ms") }
        if !(self.timeout > 0 && self.timeout <= 86_400) { throw ValidationError("--timeout takes 0 to 86400 s") }
        if !(0...(64 << 20)).contains(self.size) { throw ValidationError("--size takes 0 to 67108864 bytes") }
        if !(1...3_600_000).contains(self.maxDelay) { throw ValidationError("--max-delay takes 1 to 3600000 ms") }
        if !(self.heartbeat >= 0 && self.heartbeat <= 86_400) {
            throw ValidationError("--heartbeat takes 0 to 86400 s")
        }
        if !(self.connectTimeout > 0 && self.connectTimeout <= 86_400) {
            throw ValidationError("--connect-timeout takes 0 to 86400 s")
        }
        try WebSocketURLArgument.check(self.url, as: "<url>")
        if let user = self.user, !user.contains(":") { throw ValidationError("--user takes USER:PASS") }
        if let inFlight = self.inFlight {
            guard (1...1024).contains(inFlight) else { throw ValidationError("--in-flight takes 1 to 1024") }
            guard self.count != nil else { throw ValidationError("--in-flight needs --count") }
        }
        if let bulk = self.bulk, !(1...(1 << 30)).contains(bulk) {
            throw ValidationError("--bulk takes 1 to 1073741824 bytes")
        }
    }

    func run() async throws {
        var configuration = BLIPSession.Configuration()
        if !self.subprotocols.isEmpty { configuration.client.subprotocols = self.subprotocols }
        if let user = self.user, let colon = user.firstIndex(of: ":") {
            configuration.client.credentials = .basic(
                user: String(user[..<colon]),
                password: String(user[user.index(after: colon)...])
            )
        }
        configuration.client.heartbeatInterval = self.heartbeat > 0 ? .nanoseconds(Int64(self.heartbeat * 1e9)) : nil
        configuration.client.heartbeatTimeout = .nanoseconds(Int64(max(self.heartbeat, 1) * 1e9))
        configuration.client.connectTimeout = .nanoseconds(Int64(self.connectTimeout * 1e9))
        configuration.client.handshakeTimeout = .nanoseconds(Int64(self.connectTimeout * 1e9))
        self.reach.apply(to: &configuration.client)
        configuration.retry = BLIPRetryPolicy(
            initialDelay: .milliseconds(100),
            maximumDelay: .milliseconds(self.maxDelay)
        )
        var logger = Logger(label: "blip.session")
        logger.logLevel = .warning
        let session = BLIPSession(url: self.url, configuration: configuration, logger: logger)
        let tally = SessionTally()
        let printer = Task { await self.printStates(of: session, tally: tally) }
        let signals = SignalStop.install { session.close() }
        let sender = Task { await self.send(over: session, tally: tally) }
        var ending: BLIPSession.Ending = .stoppedByApplication
        do {
            try await session.run { _ in }
        } catch let stopped as BLIPSession.Stopped {
            ending = stopped.ending
        }
        sender.cancel()
        _ = await sender.value
        await printer.value
        signals.cancel()
        let summary = tally.summary(connections: session.connectionCount, ending: ending)
        self.print(summary)
        if !summary.succeeded { throw ExitCode(1) }
    }

    /// Sends the requests (and the bulk message), then stops the session.
    private func send(over session: BLIPSession, tally: SessionTally) async {
        if let inFlight = self.inFlight, let count = self.count {
            await self.sendBackToBack(count, inFlight: inFlight, over: session, tally: tally)
        } else {
            await self.sendAtInterval(over: session, tally: tally)
        }
        if let bulk = self.bulk { await self.sendBulk(bulk, over: session, tally: tally) }
        session.close()
    }

    /// `count` echo requests with `inFlight` of them waiting at a time, in order, on the connection of the
    /// moment; when it ends, those it held have failed and the rest go on the next one.
    private func sendBackToBack(_ count: Int, inFlight: Int, over session: BLIPSession, tally: SessionTally) async {
        let body = ByteBuffer(repeating: 0x61, count: self.size)
        var remaining = count
        while remaining > 0, let connection = await Self.nextConnection(of: session) {
            let batch = (0..<remaining).lazy.map { _ in BLIPRequest(profile: "echo", body: body) }
            let timeout = Duration.nanoseconds(Int64(self.timeout * 1e9))
            for await outcome in connection.sendRequests(batch, maximumInFlight: inFlight, timeout: timeout) {
                remaining -= 1
                tally.sent()
                switch outcome {
                case .success: tally.replied(after: nil)  // a window in flight: no single round trip
                case .failure(let error):
                    tally.failed(transient: (error as? any BLIPClassifiedError)?.isTransient ?? false)
                }
                if connection.isClosed { break }  // the rest go on the next connection
            }
        }
    }

    /// One message of `size` bytes to `sink`, sent again after each transient failure until it gets through.
    private func sendBulk(_ size: Int, over session: BLIPSession, tally: SessionTally) async {
        let body = ByteBuffer(repeating: 0x62, count: size)
        while let connection = await Self.nextConnection(of: session) {
            tally.bulkAttempt()
            do {
                _ = try await connection.sendRequest(BLIPRequest(profile: "sink", body: body))
                tally.bulkDone()
                return
            } catch {
                guard (error as? any BLIPClassifiedError)?.isTransient ?? false else { return }
            }
        }
    }

    /// The session's connection once there is one; nil once the session has stopped (or the task is cancelled).
    static func nextConnection(of session: BLIPSession) async -> BLIPConnection? {
        while !Task.isCancelled {
            if let connection = session.connection, !connection.isClosed { return connection }
            if case .stopped = session.state { return nil }
            guard (try? await Task.sleep(for: .milliseconds(10))) != nil else { return nil }
        }
        return nil
    }

    /// `count` echo requests (or until cancelled), one per interval, each on the connection of the moment.
    private func sendAtInterval(over session: BLIPSession, tally: SessionTally) async {
        let body = ByteBuffer(repeating: 0x61, count: self.size)
        var sent = 0
        var outcomes: [Task<Void, Never>] = []
        while !Task.isCancelled && sent < (self.count ?? .max) {
            guard (try? await Task.sleep(for: .milliseconds(self.interval))) != nil else { break }
            guard let connection = session.connection else { continue }  // between connections: skip a tick
            sent += 1
            tally.sent()
            let queued = connection.enqueueRequest(
                BLIPRequest(profile: "echo", body: body),
                timeout: .nanoseconds(Int64(self.timeout * 1e9))
            )
            let started = ContinuousClock.now
            outcomes.append(
                Task {
                    do {
                        _ = try await queued.reply()
                        tally.replied(after: ContinuousClock.now - started)
                    } catch {
                        tally.failed(transient: (error as? any BLIPClassifiedError)?.isTransient ?? false)
                    }
                }
            )
        }
        for outcome in outcomes { await outcome.value }
    }

    private func printStates(of session: BLIPSession, tally: SessionTally) async {
        var lastConnection: BLIPConnection?
        for await state in session.states {
            if case .connected(let connection) = state {
                tally.connected()
                lastConnection = connection
            } else if let connection = lastConnection {
                tally.disconnected()
                let statistics = connection.statistics
                self.emit(
                    event: "closed",
                    [
                        "bytes_sent": statistics.bytesSent, "bytes_received": statistics.bytesReceived,
                        "status": "\(connection.closeStatus.map { "\($0)" } ?? "open")",
                    ]
                )
                lastConnection = nil
            }
            self.emit(event: Self.name(of: state), ["detail": "\(state)"])
        }
    }

    static func name(of state: BLIPSession.State) -> String {
        switch state {
        case .connecting: "connecting"
        case .connected: "connected"
        case .waiting: "waiting"
        case .stopped: "stopped"
        }
    }

    private func emit(event: String, _ fields: [String: any Sendable]) {
        if self.json {
            var object: [String: Any] = ["event": event, "time": Date().timeIntervalSince1970]
            for (key, value) in fields { object[key] = value }
            Self.printJSON(object, to: FileHandle.standardError)
        } else {
            let details = fields.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ")
            FileHandle.standardError.write(Data("blip session: \(event) \(details)\n".utf8))
        }
    }

    private func print(_ summary: SessionTally.Summary) {
        if self.json {
            Self.printJSON(summary.fields, to: FileHandle.standardOutput)
        } else {
            Swift.print(
                summary.fields.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: "\n")
            )
        }
    }

    static func printJSON(_ object: [String: Any], to handle: FileHandle) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        handle.write(data + Data("\n".utf8))
    }
}

/// What a session's requests and connections came to.
final class SessionTally: Sendable {
    private struct State {
        var sent = 0
        var replied = 0
        var failedTransient = 0
        var failedPermanent = 0
        var roundTrips: [Duration] = []
        var disconnectedAt: ContinuousClock.Instant?
        var longestGap = Duration.zero
        var bulkAttempts = 0
        var bulkDone = false
    }

    private let state = NIOLockedValueBox(State())

    func sent() { self.state.withLockedValue { $0.sent += 1 } }
    func replied(after roundTrip: Duration?) {
        self.state.withLockedValue {
            $0.replied += 1
            if let roundTrip { $0.roundTrips.append(roundTrip) }
        }
    }
    func failed(transient: Bool) {
        self.state.withLockedValue {
            if transient { $0.failedTransient += 1 } else { $0.failedPermanent += 1 }
        }
    }
    func connected() {
        self.state.withLockedValue { state in
            if let since = state.disconnectedAt { state.longestGap = max(state.longestGap, .now - since) }
            state.disconnectedAt = nil
        }
    }
    func disconnected() { self.state.withLockedValue { $0.disconnectedAt = .now } }
    func bulkAttempt() { self.state.withLockedValue { $0.bulkAttempts += 1 } }
    func bulkDone() { self.state.withLockedValue { $0.bulkDone = true } }

    struct Summary {
        var fields: [String: Any]
        var succeeded: Bool
    }

    func summary(connections: Int, ending: BLIPSession.Ending) -> Summary {
        self.state.withLockedValue { state in
            let sorted = state.roundTrips.sorted()
            func percentile(_ p: Double) -> Double {
                guard !sorted.isEmpty else { return 0 }
                let value = sorted[min(sorted.count - 1, Int(Double(sorted.count - 1) * p))]
                return Double(value.components.seconds) * 1e3 + Double(value.components.attoseconds) / 1e15
            }
            let ms = { (duration: Duration) in
                Int(duration.components.seconds * 1_000 + duration.components.attoseconds / 1_000_000_000_000_000)
            }
            let unresolved = state.sent - state.replied - state.failedTransient - state.failedPermanent
            var fields: [String: Any] = [
                "bulk_attempts": state.bulkAttempts, "bulk_done": state.bulkDone,
                "requests": state.sent, "replied": state.replied, "failed_transient": state.failedTransient,
                "failed_permanent": state.failedPermanent, "unresolved": unresolved,
                "reconnects": max(0, connections - 1), "max_gap_ms": ms(state.longestGap),
                "rtt_p50_ms": percentile(0.5), "rtt_p99_ms": percentile(0.99), "ending": "\(ending)",
            ]
            if state.bulkAttempts == 0 {
                fields["bulk_attempts"] = nil
                fields["bulk_done"] = nil
            }
            let succeeded =
                state.failedPermanent == 0 && unresolved == 0 && ending.error == nil
                && (state.bulkAttempts == 0 || state.bulkDone)
            return Summary(fields: fields, succeeded: succeeded)
        }
    }
}

/// SIGINT and SIGTERM run `stop` (once each) instead of ending the process. Unchecked: the sources are set up
/// once and only cancelled after; Dispatch sources are safe to use from any thread.
final class SignalStop: @unchecked Sendable {
    private let sources: [any DispatchSourceSignal]

    private init(sources: [any DispatchSourceSignal]) { self.sources = sources }

    static func install(_ stop: @escaping @Sendable () -> Void) -> SignalStop {
        let sources = [SIGINT, SIGTERM].map { number -> any DispatchSourceSignal in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            source.setEventHandler(handler: stop)
            source.resume()
            return source
        }
        return SignalStop(sources: sources)
    }

    func cancel() {
        for source in self.sources { source.cancel() }
    }
}
