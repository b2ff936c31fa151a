public import BLIP
public import Foundation
public import Logging
internal import NIOConcurrencyHelpers

/// A connection to one server that comes back: it connects, runs the application's per-connection work
/// (where a replicator subscribes again), and when the connection ends for a transient reason, connects
/// again after a backoff, until the application stops it or the retry policy gives up.
///
/// ```swift
/// let session = BLIPSession(url: "wss://sg.example.com/db/_blipsync", configuration: configuration)
/// Task { for await state in session.states { print(state) } }
/// try await session.run { connection in
///     _ = try await connection.sendRequest(BLIPRequest(profile: "subChanges", properties: ["continuous": "true"]))
/// }
/// ```
///
/// Every ending is classified by `isTransient` of `BLIPClassifiedError`: a network failure, a server going
/// away or restarting (1001, 1012), 1006, 1011, 1013, HTTP 429, 502, 503 and 504 (waiting at least their
/// `Retry-After`), a proxy's 5xx and timeouts are transient; 400, 401, 403 and 404, a subprotocol no server
/// speaks, a certificate not trusted and a protocol error are not, unless ``Configuration/classify`` says
/// otherwise. A 401 can get fresh credentials once (``Configuration/refreshCredentials``). Requests in flight
/// when a connection ends fail once with its close (BLIP cannot resume a request): none is sent again.
public final class BLIPSession: Sendable {
    public struct Configuration: Sendable {
        /// How each connection is made (subprotocols, headers and credentials, TLS, proxy, timeouts).
        public var client = BLIPWebSocketClient.Configuration()
        /// Handlers for the server's requests, on every connection.
        public var router = BLIPRouter()
        public var retry = BLIPRetryPolicy.continuous
        /// Cookies set on a handshake (a session cookie) are sent again on later attempts to the same
        /// server (``BLIPCookieStore``).
        public var storesCookies = true
        /// After a 401: the configuration to try once more at once (fresh credentials), or nil to stop.
        public var refreshCredentials: (@Sendable (BLIPHandshakeError) async -> BLIPWebSocketClient.Configuration?)?
        /// The application's own classification of an ending (true: transient), or nil to keep the
        /// package's (`BLIPClassifiedError`).
        public var classify: (@Sendable (any Error) -> Bool?)?

        public init() {}
    }

    /// Where the session is.
    public enum State: Sendable, CustomStringConvertible {
        /// Connecting: the first attempt, or the n-th since the last connection that was established.
        case connecting(attempt: Int)
        case connected(BLIPConnection)
        /// Waiting before the next attempt, after `reason`.
        case waiting(until: ContinuousClock.Instant, reason: any Error)
        case stopped(Ending)

        public var description: String {
            switch self {
            case .connecting(let attempt): "connecting (attempt \(attempt))"
            case .connected: "connected"
            case .waiting(let until, let reason):
                "waiting \(max(0, (until - .now).components.seconds * 1_000 + (until - .now).components.attoseconds / 1_000_000_000_000_000)) ms: \(reason)"
            case .stopped(let ending): "stopped: \(ending)"
            }
        }
    }

    /// How a session ended.
    public enum Ending: Sendable, CustomStringConvertible {
        /// ``BLIPSession/close()`` was called.
        case stoppedByApplication
        /// An ending that trying again would not mend (credentials refused, a protocol error...).
        case permanentFailure(any Error)
        /// The retry policy's attempts ran out; the last attempt's error.
        case gaveUp(attempts: Int, lastError: any Error)
        /// The per-connection work threw (not because its connection ended).
        case workFailed(any Error)

        public var description: String {
            switch self {
            case .stoppedByApplication: "stopped by the application"
            case .permanentFailure(let error): "permanent failure: \(error)"
            case .gaveUp(let attempts, let error): "gave up after \(attempts) attempts: \(error)"
            case .workFailed(let error): "the per-connection work failed: \(error)"
            }
        }

        /// The error that ended the session; nil when the application stopped it.
        public var error: (any Error)? {
            switch self {
            case .stoppedByApplication: nil
            case .permanentFailure(let error), .gaveUp(_, let error), .workFailed(let error): error
            }
        }
    }

    /// Why ``run(_:)`` threw: the session's ending (not stopped by the application).
    public struct Stopped: Error, CustomStringConvertible {
        public var ending: Ending
        public var description: String { "BLIPSession.Stopped(\(self.ending))" }
    }

    public let url: String
    public let configuration: Configuration
    /// Cookies kept between attempts.
    public let cookies = BLIPCookieStore()
    let logger: Logger
    private let shared = NIOLockedValueBox(Shared())

    private struct Shared {
        /// Before ``run(_:)``: about to make its first attempt.
        var state = State.connecting(attempt: 1)
        var observers: [UInt64: AsyncStream<State>.Continuation] = [:]
        var nextObserver: UInt64 = 0
        var stopRequested = false
        var isRunning = false
        /// Resumes the wait before the next attempt early (``reconnectNow()``, ``close()``).
        var wake: CheckedContinuation<Void, Never>?
        var woken = false
        var connections = 0
    }

    public init(
        url: String,
        configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "blip.session")
    ) {
        self.url = url
        self.configuration = configuration
        self.logger = logger
    }

    /// A session with `url` (a `ws://` or `wss://` URL), as the initializer taking the URL as text.
    public convenience init(
        url: URL,
        configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "blip.session")
    ) {
        self.init(url: url.absoluteString, configuration: configuration, logger: logger)
    }

    /// The state now.
    public var state: State { self.shared.withLockedValue { $0.state } }

    /// The connection, while connected.
    public var connection: BLIPConnection? {
        if case .connected(let connection) = self.state { return connection }
        return nil
    }

    /// Connections established so far (reconnections are this less one).
    public var connectionCount: Int { self.shared.withLockedValue { $0.connections } }

    /// Every change of ``state`` from now on, the current one first; ends when the session stops.
    public var states: AsyncStream<State> {
        let (stream, continuation) = AsyncStream.makeStream(of: State.self, bufferingPolicy: .bufferingNewest(64))
        let (id, current) = self.shared.withLockedValue { shared -> (UInt64, State) in
            shared.nextObserver += 1
            shared.observers[shared.nextObserver] = continuation
            return (shared.nextObserver, shared.state)
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.shared.withLockedValue { $0.observers.removeValue(forKey: id) }
        }
        continuation.yield(current)
        if case .stopped = current { continuation.finish() }
        return stream
    }

    /// Skips what remains of the wait before the next attempt (a hint that the network changed).
    public func reconnectNow() {
        self.wakeUp()
    }

    /// Stops the session: the connection, if any, closes normally, and ``run(_:)`` returns.
    public func close() {
        let connection = self.shared.withLockedValue { shared -> BLIPConnection? in
            shared.stopRequested = true
            if case .connected(let connection) = shared.state { return connection }
            return nil
        }
        self.wakeUp()
        if let connection { Task { await connection.close() } }
    }

    /// Runs the session until ``close()`` (returns) or an ending that is not transient, or the retry policy
    /// giving up (throws ``Stopped``). `work` runs once per connection, as soon as it is established; the
    /// connection stays open after it returns, until it ends. Its error ends the session, unless it is the
    /// connection's own end. Cancelling the task stops the session as ``close()`` does (the connection
    /// closes, no attempt follows), and `run` throws `CancellationError`.
    public func run(_ work: @escaping @Sendable (BLIPConnection) async throws -> Void) async throws {
        let alreadyRunning = self.shared.withLockedValue { shared -> Bool in
            defer { shared.isRunning = true }
            return shared.isRunning
        }
        precondition(!alreadyRunning, "a BLIPSession runs once")
        var client = self.configuration.client
        var failures = 0
        /// Attempts since the last connection that was established (the state's attempt number).
        var attempts = 0
        var refreshed = false
        var generator = SystemRandomNumberGenerator()
        while !self.stopRequested && !Task.isCancelled {
            attempts += 1
            self.publish(.connecting(attempt: attempts))
            let established = self.connectionCount
            do {
                try await self.connectOnce(client, established: work)
                // Returned: the application stopped the session (the only close that lets the body's value stand).
                continue
            } catch let error as WorkFailed {
                return try self.finish(.workFailed(error.error))
            } catch {
                guard !self.stopRequested && !Task.isCancelled else { break }
                if self.connectionCount > established {
                    // It was established: the failures before it no longer count.
                    failures = 0
                    attempts = 0
                    refreshed = false
                }
                if let refusal = error as? BLIPHandshakeError, refusal.code == .unauthorized, !refreshed,
                    let refresh = self.configuration.refreshCredentials
                {
                    refreshed = true
                    if let fresh = await refresh(refusal) {
                        client = fresh
                        self.logger.debug("credentials refreshed after 401")
                        continue
                    }
                }
                guard self.isTransient(error) else { return try self.finish(.permanentFailure(error)) }
                failures += 1
                if let maximum = self.configuration.retry.maximumAttempts, failures >= maximum {
                    return try self.finish(.gaveUp(attempts: failures, lastError: error))
                }
                let retryAfter = (error as? BLIPHandshakeError)?.retryAfter
                let delay = self.configuration.retry.delay(
                    afterFailures: failures,
                    retryAfter: retryAfter,
                    using: &generator
                )
                self.logger.debug(
                    "connection ended; trying again",
                    metadata: ["blip.error": "\(error)", "blip.delay": "\(delay)"]
                )
                self.publish(.waiting(until: .now + delay, reason: error))
                await withTaskCancellationHandler {
                    await self.wait(delay)
                } onCancel: {
                    self.wakeUp()
                }
            }
        }
        try self.finish(.stoppedByApplication)
        if Task.isCancelled && !self.stopRequested { throw CancellationError() }
    }

    private var stopRequested: Bool { self.shared.withLockedValue { $0.stopRequested } }

    /// One connection: established, its work run, then open until it ends. Returns when the application
    /// stopped the session; throws the connection's end (or ``WorkFailed``).
    private func connectOnce(
        _ client: BLIPWebSocketClient.Configuration,
        established: @escaping @Sendable (BLIPConnection) async throws -> Void
    ) async throws {
        var client = client
        if self.configuration.storesCookies, let url = BLIPWebSocketURL(self.url),
            let cookie = self.cookies.cookieHeader(for: url)
        {
            client.headers = Self.merging(cookie: cookie, into: client.headers)
        }
        try await BLIPWebSocketClient.connect(
            to: self.url,
            configuration: client,
            router: self.configuration.router,
            logger: self.logger
        ) { connection in
            if self.configuration.storesCookies, let url = BLIPWebSocketURL(self.url),
                let fields = connection.handshakeResponse?.headers["Set-Cookie"], !fields.isEmpty
            {
                self.cookies.store(setCookieFields: fields, from: url)
            }
            let stopNow = self.shared.withLockedValue { shared -> Bool in
                shared.connections += 1
                return shared.stopRequested
            }
            self.publish(.connected(connection))
            if stopNow {
                await connection.close()
                return
            }
            do {
                try await established(connection)
            } catch {
                // The connection's own end is the session's business; anything else ends the session.
                if connection.isClosed || Task.isCancelled { throw error }
                throw WorkFailed(error: error)
            }
            // Open until it ends, or until run's task is cancelled, which closes it as close() does.
            _ = await withTaskCancellationHandler {
                await connection.closed()
            } onCancel: {
                Task { await connection.close() }
            }
        }
    }

    /// The work's own error, apart from the connection's end.
    private struct WorkFailed: Error {
        var error: any Error
    }

    private func isTransient(_ error: any Error) -> Bool {
        if let decided = self.configuration.classify?(error) { return decided }
        return (error as? any BLIPClassifiedError)?.isTransient ?? false
    }

    /// Publishes the final state; throws unless the application stopped the session.
    private func finish(_ ending: Ending) throws {
        self.publish(.stopped(ending))
        let observers = self.shared.withLockedValue { shared in
            defer { shared.observers.removeAll() }
            return Array(shared.observers.values)
        }
        for observer in observers { observer.finish() }
        if case .stoppedByApplication = ending { return }
        throw Stopped(ending: ending)
    }

    private func publish(_ state: State) {
        let observers = self.shared.withLockedValue { shared -> [AsyncStream<State>.Continuation] in
            // The first attempt is the state from the start: observers have seen it already.
            if case .connecting(let attempt) = state, case .connecting(let current) = shared.state, attempt == current {
                return []
            }
            shared.state = state
            return Array(shared.observers.values)
        }
        for observer in observers { observer.yield(state) }
    }

    /// Waits `delay`, or less if woken (``reconnectNow()``, ``close()``).
    private func wait(_ delay: Duration) async {
        let sleeper = Task { [weak self] in
            try? await Task.sleep(for: delay)
            self?.wakeUp()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = self.shared.withLockedValue { shared -> Bool in
                if shared.woken || shared.stopRequested {
                    shared.woken = false
                    return true
                }
                shared.wake = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
        sleeper.cancel()
    }

    private func wakeUp() {
        let waiter = self.shared.withLockedValue { shared -> CheckedContinuation<Void, Never>? in
            guard let waiter = shared.wake else {
                // Not waiting yet: the next wait ends at once (only while one is about to begin).
                if case .waiting = shared.state { shared.woken = true }
                return nil
            }
            shared.wake = nil
            shared.woken = false
            return waiter
        }
        waiter?.resume()
    }

    static func merging(cookie: String, into headers: HTTPFields) -> HTTPFields {
        var headers = headers
        if let index = headers.firstIndex(where: { $0.name == .cookie }) {
            headers[index].value += "; " + cookie
        } else {
            headers.append(HTTPField(name: .cookie, value: cookie))
        }
        return headers
    }
}
