import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// The reconnecting session against every way a connection can end: the session connects again after a
/// transient ending (after its backoff, or at once on `reconnectNow()`), stops on a permanent one, and a
/// request in flight when the connection ends fails exactly once, with an error whose `isTransient` says
/// which it was.
@Suite("The reconnecting session", .timeLimit(.minutes(3)))
struct SessionTests {
    /// What a test server does on each upgrade: the next decision, or accept when none is left.
    final class Script: Sendable {
        let decisions: NIOLockedValueBox<[BLIPUpgradeDecision]>
        let cookies = NIOLockedValueBox<[String?]>([])
        let upgrades = Atomic<Int>(0)

        init(_ decisions: [BLIPUpgradeDecision] = []) {
            self.decisions = NIOLockedValueBox(decisions)
        }

        var handler: BLIPWebSocketServer.UpgradeHandler {
            { request in
                self.upgrades.add(1, ordering: .relaxed)
                self.cookies.withLockedValue { $0.append(request.headers.first("Cookie")) }
                return self.decisions.withLockedValue { $0.isEmpty ? .accept() : $0.removeFirst() }
            }
        }
    }

    /// `hold` never answers; `end` closes the connection with the code in its `Code` property (after its
    /// reply); `echo` echoes.
    static func router() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3_600))
            return BLIPResponse()
        }
        router.register(profile: "end") { request, context in
            let code = UInt16(request.properties["Code"] ?? "") ?? 1000
            context.closeAfterReply(code: BLIPCloseCode(rawValue: code), reason: "ended by the test")
            return BLIPResponse()
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        return router
    }

    static func fastRetry(maximumAttempts: Int? = nil) -> BLIPRetryPolicy {
        BLIPRetryPolicy(
            initialDelay: .milliseconds(20),
            maximumDelay: .milliseconds(200),
            maximumAttempts: maximumAttempts
        )
    }

    /// Binds a server on `port` (0: a free one).
    static func bind(port: Int = 0, script: Script) async throws -> BLIPWebSocketServer {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = port
        configuration.heartbeatInterval = nil
        return try await BLIPWebSocketServer.bind(
            configuration: configuration,
            router: Self.router(),
            upgradeHandler: script.handler
        )
    }

    /// Records every state, and how each connection's in-flight `hold` request ended.
    final class Observations: Sendable {
        let states = NIOLockedValueBox<[String]>([])
        let holds = NIOLockedValueBox<[String]>([])

        func record(_ error: any Error) {
            let transient = (error as? any BLIPClassifiedError)?.isTransient
            self.holds.withLockedValue { $0.append("\(type(of: error)) transient=\(transient.map { "\($0)" } ?? "-")") }
        }

        func watch(_ session: BLIPSession) -> Task<Void, Never> {
            Task {
                for await state in session.states {
                    let name: String
                    switch state {
                    case .connecting(let attempt): name = "connecting \(attempt)"
                    case .connected: name = "connected"
                    case .waiting: name = "waiting"
                    case .stopped(let ending): name = "stopped \(ending)"
                    }
                    self.states.withLockedValue { $0.append(name) }
                }
            }
        }
    }

    /// Waits (bounded) until `condition` holds.
    static func eventually(_ what: String, _ condition: () -> Bool) async throws {
        for _ in 0..<3_000 where !condition() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(condition(), "never: \(what)")
    }

    struct Ending: Sendable, CustomTestStringConvertible {
        var name: String
        var closeCode: UInt16
        var reconnects: Bool
        var testDescription: String { self.name }
    }

    static let closeEndings: [Ending] = [
        Ending(name: "1001 going away", closeCode: 1001, reconnects: true),
        Ending(name: "1012 service restart", closeCode: 1012, reconnects: true),
        Ending(name: "1013 try again later", closeCode: 1013, reconnects: true),
        Ending(name: "1011 internal error", closeCode: 1011, reconnects: true),
        Ending(name: "1000 normal", closeCode: 1000, reconnects: true),
        Ending(name: "4001 an application's code", closeCode: 4001, reconnects: true),
        Ending(name: "1008 policy violation", closeCode: 1008, reconnects: false),
        Ending(name: "1002 protocol error", closeCode: 1002, reconnects: false),
    ]

    @Test(
        "the server closes with a code: a request in flight fails once; the session goes on or stops",
        arguments: closeEndings
    )
    func serverCloses(_ ending: Ending) async throws {
        let script = Script()
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
        let observations = Observations()
        let watcher = observations.watch(session)
        let running = Task {
            try await session.run { connection in
                let hold = connection.enqueueRequest(BLIPRequest(profile: "hold"))
                Task {
                    do { _ = try await hold.reply() } catch { observations.record(error) }
                }
                if session.connectionCount == 1 {
                    _ = try await connection.sendRequest(
                        BLIPRequest(profile: "end", properties: ["Code": "\(ending.closeCode)"])
                    )
                }
            }
        }
        if ending.reconnects {
            try await Self.eventually("a second connection") { session.connectionCount == 2 }
            session.close()
            try await running.value
        } else {
            let error = await #expect(throws: BLIPSession.Stopped.self) { try await running.value }
            guard case .permanentFailure(let underlying)? = error?.ending else {
                Issue.record("ended \(String(describing: error))")
                return
            }
            #expect((underlying as? BLIPConnectionError)?.closeStatus?.code.rawValue == ending.closeCode)
        }
        await watcher.value
        // The first connection's request failed once, as transient exactly when the session went on; the
        // second's (after stop) as a local close.
        try await Self.eventually("the requests ended") {
            observations.holds.withLockedValue { $0.count } >= (ending.reconnects ? 2 : 1)
        }
        let holds = observations.holds.withLockedValue { $0 }
        #expect(holds.first == "BLIPConnectionError transient=\(ending.reconnects)", "\(holds)")
        #expect(holds.count == (ending.reconnects ? 2 : 1), "\(holds)")
        let states = observations.states.withLockedValue { $0 }
        #expect(states.first == "connecting 1" && states.dropFirst().first == "connected", "\(states)")
        #expect(states.last?.hasPrefix("stopped") == true, "\(states)")
        #expect(states.contains("waiting") == ending.reconnects, "\(states)")
        await server.close()
        await serving
    }

    struct Refusal: Sendable, CustomTestStringConvertible {
        var name: String
        var decision: BLIPUpgradeDecision
        var transient: Bool
        var testDescription: String { self.name }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "401", decision: .unauthorized(realm: "db"), transient: false),
        Refusal(name: "403", decision: .forbidden(), transient: false),
        Refusal(name: "404", decision: .notFound(), transient: false),
        Refusal(name: "400", decision: .refuse(status: 400, headers: [:], body: "bad"), transient: false),
        Refusal(name: "429", decision: .refuse(status: 429, headers: [:], body: "slow down"), transient: true),
        Refusal(name: "502", decision: .refuse(status: 502, headers: [:], body: "bad gateway"), transient: true),
        Refusal(name: "503", decision: .refuse(status: 503, headers: [:], body: "busy"), transient: true),
        Refusal(name: "504", decision: .refuse(status: 504, headers: [:], body: "gateway timeout"), transient: true),
    ]

    @Test("a refused handshake: transient ones are tried again, the others stop the session", arguments: refusals)
    func refusedHandshake(_ refusal: Refusal) async throws {
        let script = Script([refusal.decision])
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
        let running = Task { try await session.run { _ in } }
        if refusal.transient {
            try await Self.eventually("connected after the refusal") { session.connectionCount == 1 }
            session.close()
            try await running.value
            #expect(script.upgrades.load(ordering: .relaxed) == 2)
        } else {
            let error = await #expect(throws: BLIPSession.Stopped.self) { try await running.value }
            guard case .permanentFailure(let underlying)? = error?.ending else {
                Issue.record("ended \(String(describing: error))")
                return
            }
            #expect((underlying as? BLIPHandshakeError)?.status == Int(refusal.name))
            #expect(script.upgrades.load(ordering: .relaxed) == 1)
        }
        await server.close()
        await serving
    }

    @Test("503 with Retry-After: the next attempt waits at least that long")
    func retryAfterIsHonoured() async throws {
        let script = Script([.refuse(status: 503, headers: ["Retry-After": "1"], body: "busy")])
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
        let start = ContinuousClock.now
        let running = Task { try await session.run { _ in } }
        try await Self.eventually("connected after Retry-After") { session.connectionCount == 1 }
        #expect(ContinuousClock.now - start >= .seconds(1))
        session.close()
        try await running.value
        await server.close()
        await serving
    }

    @Test("a 401 gets fresh credentials once; a second 401 stops the session")
    func refreshedCredentials() async throws {
        let script = Script([.unauthorized(realm: "db")])
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        let refreshes = Atomic<Int>(0)
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        configuration.refreshCredentials = { _ in
            refreshes.add(1, ordering: .relaxed)
            var fresh = BLIPWebSocketClient.Configuration()
            fresh.headers = ["Authorization": "Bearer fresh"]
            return fresh
        }
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
        let running = Task { try await session.run { _ in } }
        try await Self.eventually("connected with fresh credentials") { session.connectionCount == 1 }
        #expect(refreshes.load(ordering: .relaxed) == 1)
        session.close()
        try await running.value

        // Refused again after the refresh: the session stops.
        let twice = Script([.unauthorized(realm: "db"), .unauthorized(realm: "db")])
        let strict = try await Self.bind(script: twice)
        async let servingStrict: Void = strict.run()
        let second = BLIPSession(url: "ws://127.0.0.1:\(strict.port)/", configuration: configuration)
        await #expect(throws: BLIPSession.Stopped.self) { try await second.run { _ in } }
        #expect(twice.upgrades.load(ordering: .relaxed) == 2)
        await server.close()
        await strict.close()
        await serving
        await servingStrict
    }

    @Test("nothing listens: the session keeps trying, and connects once the server is back")
    func serverComesBack() async throws {
        // A port held, refusing, for the whole test: no other suite's server can take it meanwhile.
        let script = Script()
        let reservation = try LoopbackPortReservation()
        defer { withExtendedLifetime(reservation) {} }
        let port = reservation.port
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        let session = BLIPSession(url: "ws://127.0.0.1:\(port)/", configuration: configuration)
        let observations = Observations()
        let watcher = observations.watch(session)
        let running = Task { try await session.run { _ in } }
        try await Self.eventually("a few refused attempts") {
            observations.states.withLockedValue { $0.filter { $0 == "waiting" }.count } >= 3
        }
        let server = try await Self.bind(port: port, script: script)
        async let serving: Void = server.run()
        try await Self.eventually("connected once the server is back") { session.connectionCount == 1 }
        session.close()
        try await running.value
        await watcher.value
        await server.close()
        await serving
    }

    @Test("the retry policy gives up after its attempts")
    func givesUp() async throws {
        let reservation = try LoopbackPortReservation()
        defer { withExtendedLifetime(reservation) {} }
        let port = reservation.port
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry(maximumAttempts: 3)
        let session = BLIPSession(url: "ws://127.0.0.1:\(port)/", configuration: configuration)
        let error = await #expect(throws: BLIPSession.Stopped.self) { try await session.run { _ in } }
        guard case .gaveUp(let attempts, let last)? = error?.ending else {
            Issue.record("ended \(String(describing: error))")
            return
        }
        #expect(attempts == 3)
        #expect((last as? any BLIPClassifiedError)?.isTransient == true)
    }

    @Test("reconnectNow() skips the rest of a long wait; stop() while waiting returns at once")
    func reconnectNowAndStop() async throws {
        let script = Script([.refuse(status: 503, headers: [:], body: "busy")])
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = BLIPRetryPolicy(initialDelay: .seconds(60), usesFullJitter: false)
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/", configuration: configuration)
        let running = Task { try await session.run { _ in } }
        try await Self.eventually("waiting a minute") { if case .waiting = session.state { true } else { false } }
        let start = ContinuousClock.now
        session.reconnectNow()
        try await Self.eventually("connected at once") { session.connectionCount == 1 }
        #expect(ContinuousClock.now - start < .seconds(30))
        session.close()
        try await running.value

        // Stopped while waiting a minute: run returns at once.
        let waiting = Script([.refuse(status: 503, headers: [:], body: "busy")])
        let other = try await Self.bind(script: waiting)
        async let servingOther: Void = other.run()
        let second = BLIPSession(url: "ws://127.0.0.1:\(other.port)/", configuration: configuration)
        let secondRun = Task { try await second.run { _ in } }
        try await Self.eventually("waiting a minute") { if case .waiting = second.state { true } else { false } }
        let stopped = ContinuousClock.now
        second.close()
        try await secondRun.value
        #expect(ContinuousClock.now - stopped < .seconds(30))
        await server.close()
        await other.close()
        await serving
        await servingOther
    }

    @Test("cancelling run's task stops the session, connected or waiting: CancellationError, no further attempt")
    func cancellationStops() async throws {
        let open = try await Self.bind(script: Script([]))
        async let servingOpen: Void = open.run()
        let connected = BLIPSession(url: "ws://127.0.0.1:\(open.port)/", configuration: BLIPSession.Configuration())
        let connectedRun = Task { try await connected.run { _ in } }
        try await Self.eventually("connected") { connected.connectionCount == 1 }
        connectedRun.cancel()
        await #expect(throws: CancellationError.self) { try await connectedRun.value }
        guard case .stopped(.stoppedByApplication) = connected.state else {
            Issue.record("state after cancelling: \(connected.state)")
            return
        }

        let busy = try await Self.bind(script: Script([.refuse(status: 503, headers: [:], body: "busy")]))
        async let servingBusy: Void = busy.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = BLIPRetryPolicy(initialDelay: .seconds(60), usesFullJitter: false)
        let waiting = BLIPSession(url: "ws://127.0.0.1:\(busy.port)/", configuration: configuration)
        let waitingRun = Task { try await waiting.run { _ in } }
        try await Self.eventually("waiting a minute") { if case .waiting = waiting.state { true } else { false } }
        let cancelled = ContinuousClock.now
        waitingRun.cancel()
        await #expect(throws: CancellationError.self) { try await waitingRun.value }
        #expect(ContinuousClock.now - cancelled < .seconds(30))
        #expect(waiting.connectionCount == 0)
        await open.close()
        await busy.close()
        await servingOpen
        await servingBusy
    }

    @Test("a cookie set on the handshake goes back on later attempts to the same server")
    func cookiesReplayed() async throws {
        let script = Script([
            .accept(identity: "alice", headers: ["Set-Cookie": "SyncGatewaySession=abc123; Path=/db/; Max-Age=3600"])
        ])
        let server = try await Self.bind(script: script)
        async let serving: Void = server.run()
        var configuration = BLIPSession.Configuration()
        configuration.retry = Self.fastRetry()
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/db/_blipsync", configuration: configuration)
        let running = Task {
            try await session.run { connection in
                if session.connectionCount == 1 {
                    _ = try await connection.sendRequest(BLIPRequest(profile: "end", properties: ["Code": "1001"]))
                }
            }
        }
        try await Self.eventually("reconnected") { session.connectionCount == 2 }
        session.close()
        try await running.value
        #expect(script.cookies.withLockedValue { $0 } == [nil, "SyncGatewaySession=abc123"])
        await server.close()
        await serving
    }

    @Test("the work's own error ends the session with it; the connection's end does not")
    func workFails() async throws {
        struct Broken: Error {}
        let server = try await Self.bind(script: Script())
        async let serving: Void = server.run()
        let session = BLIPSession(url: "ws://127.0.0.1:\(server.port)/")
        let error = await #expect(throws: BLIPSession.Stopped.self) {
            try await session.run { _ in throw Broken() }
        }
        guard case .workFailed(let underlying)? = error?.ending else {
            Issue.record("ended \(String(describing: error))")
            return
        }
        #expect(underlying is Broken)
        await server.close()
        await serving
    }

    @Test("the retry policy: backoff doubles up to its maximum; jitter stays within it; Retry-After wins")
    func retryPolicy() {
        let policy = BLIPRetryPolicy(initialDelay: .seconds(1), multiplier: 2, maximumDelay: .seconds(300))
        #expect(policy.backoff(afterFailures: 1) == .seconds(1))
        #expect(policy.backoff(afterFailures: 2) == .seconds(2))
        #expect(policy.backoff(afterFailures: 5) == .seconds(16))
        #expect(policy.backoff(afterFailures: 50) == .seconds(300))
        var generator = SystemRandomNumberGenerator()
        for failures in 1...20 {
            let delay = policy.delay(afterFailures: failures, using: &generator)
            #expect(delay >= .zero && delay <= policy.backoff(afterFailures: failures))
        }
        #expect(policy.delay(afterFailures: 1, retryAfter: .seconds(30), using: &generator) == .seconds(30))
        #expect(BLIPRetryPolicy.singleShot.maximumAttempts == 10)
        #expect(BLIPRetryPolicy.continuous.maximumAttempts == nil)
        #expect(BLIPRetryPolicy.continuous.maximumDelay == .seconds(300))
    }

    @Test("the cookie store: path, secure, expiry, and nothing across servers")
    func cookieStore() throws {
        let store = BLIPCookieStore()
        let url = try #require(BLIPWebSocketURL("ws://sg.example.com:4984/db/_blipsync"))
        store.store(
            setCookieFields: [
                "A=1; Path=/db/", "B=2; Path=/other", "C=3; Secure", "D=4; Max-Age=0", "E=5",
                "F=6; Expires=Wed, 21 Oct 2015 07:28:00 GMT",
            ],
            from: url
        )
        #expect(store.cookieHeader(for: url) == "A=1; E=5")
        let secure = try #require(BLIPWebSocketURL("wss://sg.example.com:4984/db/_blipsync"))
        #expect(store.cookieHeader(for: secure) == nil, "another origin (wss, another port)")
        let other = try #require(BLIPWebSocketURL("ws://evil.example:4984/db/_blipsync"))
        #expect(store.cookieHeader(for: other) == nil)
        store.store(setCookieFields: ["C=3; Secure; Path=/"], from: secure)
        #expect(store.cookieHeader(for: secure) == "C=3")
    }
}
