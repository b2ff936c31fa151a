import BLIPTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import BLIP

/// Seeded sessions of two connections (the production rules: buffer budget, ACK withholding, serial order,
/// deadlines) in which requests end every way a caller can end them: answered, refused, cancelled, timed
/// out, or cut short when either side closes or the link is cut, mid-session. Requests go through every
/// send API (awaited, queued, reply callback, no-reply) with random sizes, urgency and compression, to
/// serial or concurrent handlers. Each session checks that every request ended exactly once and only in a
/// way its fate allows, that serial handlers ran in send order, that the server held no more than its hard
/// limit, and that neither connection kept anything once it was over. `BLIP_ENDING_SESSIONS` sets the
/// number of sessions (default 1 000); a failing seed is printed (`BLIP_ENDING_FIRST_SEED` replays from it).
@Suite("Seeded sessions that end requests every way", .timeLimit(.minutes(5)))
struct EndingSessionSimulationTests {
    static let sessions = Int(ProcessInfo.processInfo.environment["BLIP_ENDING_SESSIONS"] ?? "") ?? 1_000

    enum API: CaseIterable {
        case awaited, queued, callback, noReply
    }

    enum Fate {
        case none
        /// Cancelled after this many yields of the canceller.
        case cancel(afterYields: Int)
        case deadline(Duration)
    }

    enum SessionEnd: CaseIterable {
        case normal, clientCloses, serverCloses, linkCut
    }

    struct Spec {
        var size: Int
        var api: API
        var fate: Fate
        var urgent: Bool
        var compressed: Bool
        var profile: String
    }

    struct Plan: CustomStringConvertible {
        var seed: UInt64
        var dialect: BLIPDialect
        var serial: Bool
        var budget: Int
        var requests: [Spec]
        var end: SessionEnd
        /// The request before which a session that does not end normally ends.
        var endAt: Int

        var description: String {
            "seed \(self.seed): \(self.dialect), \(self.serial ? "serial" : "concurrent"), budget \(self.budget), "
                + "\(self.requests.count) requests, end \(self.end) at \(self.endAt)"
        }

        init(seed: UInt64) {
            var random = SeededRandom(seed: seed)
            func pick(_ count: Int) -> Int { Int(random.next() % UInt64(count)) }
            self.seed = seed
            self.dialect = BLIPDialect.allCases[pick(BLIPDialect.allCases.count)]
            self.serial = pick(2) == 0
            self.budget = [1 << 20, 4 << 20, 64 << 20][pick(3)]
            // The seed dialect has no flow control: its budget must hold everything in flight.
            if self.dialect == .seed { self.budget = 64 << 20 }
            let profiles = ["record", "record-sync", "record-stream"]
            var requests: [Spec] = []
            for _ in 0..<(8 + pick(32)) {
                let api = API.allCases[pick(API.allCases.count)]
                let fate: Fate
                switch pick(6) {
                case 0, 1: fate = .cancel(afterYields: pick(20))
                case 2, 3: fate = .deadline(.microseconds(Int64(pick(3_000))))
                default: fate = .none
                }
                // Log-uniform sizes up to 128 KiB; no-reply requests small, as a feed's are.
                let size = pick(8) == 0 ? 0 : (128 << 10) >> pick(17)
                requests.append(
                    Spec(
                        size: api == .noReply ? min(size, 4_096) : size,
                        api: api,
                        fate: fate,
                        urgent: pick(6) == 0,
                        compressed: pick(3) == 0,
                        profile: profiles[pick(3)]
                    )
                )
            }
            self.requests = requests
            self.end = SessionEnd.allCases[pick(SessionEnd.allCases.count)]
            // In the second half mostly, so that most requests are in flight or done when it comes.
            self.endAt = requests.count / 3 + pick(requests.count - requests.count / 3)
        }
    }

    /// Each request's endings, by its place in the plan.
    final class Endings: Sendable {
        private let state = NIOLockedValueBox<[Int: [String]]>([:])
        func record(_ seq: Int, _ ending: String) { self.state.withLockedValue { $0[seq, default: []].append(ending) } }
        var all: [Int: [String]] { self.state.withLockedValue { $0 } }
        var count: Int { self.state.withLockedValue { $0.values.reduce(0) { $0 + $1.count } } }
    }

    @Test("every request ends exactly once, as its fate allows; nothing is left on either side")
    func sessions() async throws {
        let first = UInt64(ProcessInfo.processInfo.environment["BLIP_ENDING_FIRST_SEED"] ?? "") ?? 0
        var seen: [String: Int] = [:]
        for seed in first..<(first + UInt64(Self.sessions)) {
            let plan = Plan(seed: seed)
            let failures: [String]
            do {
                (failures, seen) = try await (Self.run(plan, tally: seen))
            } catch {
                failures = ["the session failed: \(error)"]
            }
            #expect(failures.isEmpty, "\(plan): \(failures)")
            if !failures.isEmpty { return }
        }
        print("ending sessions: \(Self.sessions) sessions, endings \(seen.sorted { $0.key < $1.key })")
        // The sessions reach every way of ending, or they would prove little.
        for ending in ["reply", "sent", "cancelled", "timedOut", "closed"] {
            #expect(seen[ending, default: 0] > 0, "no request ended \(ending): \(seen)")
        }
    }

    /// Plays one session; returns what went wrong (nothing, when it kept every promise), and `tally` with its
    /// endings counted in.
    static func run(_ plan: Plan, tally: [String: Int]) async throws -> ([String], [String: Int]) {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = plan.budget
        configuration.incomingBufferHardLimit = plan.budget * 2
        let peers = InMemoryPeers(
            dialect: plan.dialect,
            router: log.router(order: plan.serial ? .serial : .concurrent),
            serverConfiguration: configuration
        )
        let endings = Endings()
        let client = NIOLockedValueBox<BLIPConnection?>(nil)
        do {
            try await peers.run { connection in
                client.withLockedValue { $0 = connection }
                await Self.send(plan, on: connection, peers: peers, endings: endings)
            }
        } catch let error as BLIPConnectionError where plan.end != .normal {
            _ = error  // the session was cut short: withBLIPConnection says so
        }
        var tally = tally
        for ends in endings.all.values { for ending in ends { tally[ending, default: 0] += 1 } }
        let failures = try await Self.check(
            plan,
            endings: endings,
            log: log,
            peers: peers,
            client: client.withLockedValue { $0 }
        )
        return (failures, tally)
    }

    /// Sends the plan's requests, ends the session where the plan says, and waits for every ending.
    static func send(_ plan: Plan, on connection: BLIPConnection, peers: InMemoryPeers, endings: Endings) async {
        let server = peers.serverConnection
        let link = peers.client
        await withTaskGroup(of: Void.self) { group in
            for (seq, spec) in plan.requests.enumerated() {
                if seq == plan.endAt {
                    switch plan.end {
                    case .normal: break
                    case .clientCloses: group.addTask { await connection.close() }
                    case .serverCloses: group.addTask { await server.close(code: .goingAway) }
                    case .linkCut: link.cut()
                    }
                }
                let request = BLIPRequest(
                    profile: spec.profile,
                    properties: ["Seq": "\(seq)"],
                    body: pattern(spec.size),
                    urgent: spec.urgent,
                    compressed: spec.compressed
                )
                let timeout: Duration? = if case .deadline(let deadline) = spec.fate { deadline } else { nil }
                let cancel: @Sendable () -> Void
                switch spec.api {
                case .awaited:
                    let task = Task {
                        do {
                            _ = try await connection.sendRequest(request, timeout: timeout)
                            endings.record(seq, "reply")
                        } catch {
                            endings.record(seq, Self.describe(error))
                        }
                    }
                    group.addTask { await task.value }
                    cancel = { task.cancel() }
                case .queued:
                    let queued = connection.enqueueRequest(request, timeout: timeout)
                    group.addTask {
                        do {
                            _ = try await queued.reply()
                            endings.record(seq, "reply")
                        } catch {
                            endings.record(seq, Self.describe(error))
                        }
                    }
                    cancel = { queued.cancel() }
                case .callback:
                    let pending = connection.sendRequest(request, timeout: timeout) { result in
                        switch result {
                        case .success: endings.record(seq, "reply")
                        case .failure(let error): endings.record(seq, Self.describe(error))
                        }
                    }
                    cancel = { pending.cancel() }
                case .noReply:
                    let task = Task {
                        do {
                            try await connection.sendNoReply(request, timeout: timeout)
                            endings.record(seq, "sent")
                        } catch {
                            endings.record(seq, Self.describe(error))
                        }
                    }
                    group.addTask { await task.value }
                    cancel = { task.cancel() }
                }
                if case .cancel(let yields) = spec.fate {
                    group.addTask {
                        for _ in 0..<yields { await Task.yield() }
                        cancel()
                    }
                }
                if seq % 4 == 3 { await Task.yield() }
            }
        }
        // Reply callbacks are not tasks of the group: wait for theirs (bounded).
        for _ in 0..<4_000 where endings.count < plan.requests.count {
            try? await Task.sleep(for: .milliseconds(5))
        }
    }

    static func describe(_ error: any Error) -> String {
        if let error = error as? BLIPError { return error.code == .busy ? "busy" : "ERR \(error.code.rawValue)" }
        if error is CancellationError { return "cancelled" }
        if let error = error as? BLIPConnectionError {
            switch error.code {
            case .timedOut: return "timedOut"
            case .connectionClosed, .transportFailed: return "closed"
            default: return "\(error)"
            }
        }
        return "\(error)"
    }

    static func check(
        _ plan: Plan,
        endings: Endings,
        log: OrderLog,
        peers: InMemoryPeers,
        client: BLIPConnection?
    ) async throws -> [String] {
        var failures: [String] = []
        let recorded = endings.all
        for (seq, spec) in plan.requests.enumerated() {
            let ends = recorded[seq] ?? []
            guard ends.count == 1 else {
                failures.append("request \(seq) ended \(ends.count) times: \(ends)")
                continue
            }
            var allowed: Set<String> = [spec.api == .noReply ? "sent" : "reply"]
            if spec.api != .noReply { allowed.insert("busy") }
            if case .cancel = spec.fate { allowed.insert("cancelled") }
            if case .deadline = spec.fate { allowed.insert("timedOut") }
            if plan.end != .normal { allowed.insert("closed") }
            if !allowed.contains(ends[0]) {
                failures.append("request \(seq) (\(spec.api), \(spec.fate)) ended \(ends[0])")
            }
        }
        if plan.serial {
            // Request numbers, not places in the plan: awaited and no-reply requests are sent from tasks of
            // their own, which may queue them in another order than the plan's.
            let numbers = log.numbers
            if numbers != numbers.sorted() || Set(numbers).count != numbers.count {
                failures.append("handled out of order: \(numbers)")
            }
            if log.mostAtOnce > 1 { failures.append("\(log.mostAtOnce) serial handlers at once") }
        }
        let statistics = peers.serverConnection.statistics
        if statistics.peakBufferedIncomingBytes > plan.budget * 2 {
            failures.append("held \(statistics.peakBufferedIncomingBytes) bytes, over the hard limit")
        }
        // Both connections are closed now: neither keeps anything.
        let connections = [("server", peers.serverConnection)] + (client.map { [("client", $0)] } ?? [])
        for (side, connection) in connections {
            for _ in 0..<400 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(5))
            }
            if connection.core.pendingBookkeeping > 0 {
                failures.append("\(side) left behind: \(connection.stateDescription)")
            }
        }
        return failures
    }
}
