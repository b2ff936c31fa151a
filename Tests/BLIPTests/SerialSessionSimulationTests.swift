import BLIPTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

@testable import BLIP

/// Seeded peer-to-peer sessions of two connections (not bare engines: the buffer budget, ACK withholding and
/// serial order run as in production) where the receiver's handlers are serial and the sender queues requests
/// of mixed sizes and kinds (no-reply, urgent, compressed; whole, synchronous and streaming handlers) that
/// interleave on the wire. Each session checks that handlers ran one at a time in send order, that every
/// request ended once, that buffered bytes stayed within the hard limit, and that nothing was left behind.
/// `BLIP_SERIAL_SESSIONS` sets the number of sessions (default 200); a failing seed is printed.
@Suite("Seeded sessions with serial receivers", .timeLimit(.minutes(5)))
struct SerialSessionSimulationTests {
    static let sessions = Int(ProcessInfo.processInfo.environment["BLIP_SERIAL_SESSIONS"] ?? "") ?? 200

    struct Plan: CustomStringConvertible {
        var seed: UInt64
        var dialect: BLIPDialect
        var budget: Int
        var window: Int
        var requests: [(size: Int, noReply: Bool, urgent: Bool, compressed: Bool, profile: String)]
        var description: String {
            "seed \(self.seed): \(self.dialect), budget \(self.budget), window \(self.window), \(self.requests.count) requests"
        }

        init(seed: UInt64) {
            var random = SeededRandom(seed: seed)
            self.seed = seed
            self.dialect = BLIPDialect.allCases[Int(random.next() % UInt64(BLIPDialect.allCases.count))]
            // Budgets from a few send windows (128 000 bytes each: what one message may have unacknowledged)
            // up to the default.
            self.budget = [1 << 20, 2 << 20, 4 << 20, 64 << 20][Int(random.next() % 4)]
            // The seed dialect has no flow control: nothing but a pause in reading holds a peer back, and what
            // is still arriving cannot be waited for that way. Its budget must hold everything in flight.
            if self.dialect == .seed { self.budget = 64 << 20 }
            self.window = 1 + Int(random.next() % 48)
            let profiles = ["record", "record-sync", "record-stream"]
            self.requests = (0..<(10 + Int(random.next() % 60))).map { _ in
                // Log-uniform sizes up to 256 KiB, so that some requests span many frames and most fit one.
                let size = (256 << 10) >> Int(random.next() % 19)
                let noReply = random.next() % 5 == 0
                return (
                    // No-reply requests are small, as a feed's are: behind a request still arriving they can
                    // only be held (nothing could tell their sender they were refused), so they count
                    // towards the hard limit, which only a peer sending more than it of them reaches.
                    size: random.next() % 8 == 0 ? 0 : (noReply ? min(size, 4_096) : size),
                    noReply: noReply,
                    urgent: random.next() % 6 == 0,
                    compressed: random.next() % 3 == 0,
                    profile: profiles[Int(random.next() % 3)]
                )
            }
            // Last, a request with a reply: in serial order it is answered once every earlier one has been
            // handled, so that the session does not end (closing the connection) before they were.
            self.requests.append((size: 0, noReply: false, urgent: false, compressed: false, profile: "record"))
        }
    }

    @Test("every session keeps send order and every ending once", arguments: 0..<1)
    func sessions(_: Int) async throws {
        let first = UInt64(ProcessInfo.processInfo.environment["BLIP_SERIAL_FIRST_SEED"] ?? "") ?? 0
        for seed in first..<(first + UInt64(Self.sessions)) {
            let plan = Plan(seed: seed)
            let failures: [String]
            do {
                failures = try await Self.run(plan)
            } catch {
                failures = ["the session failed: \(error)"]
            }
            #expect(failures.isEmpty, "\(plan): \(failures)")
            if !failures.isEmpty { break }
        }
    }

    /// Plays one session; returns what went wrong (nothing, when it kept every promise).
    static func run(_ plan: Plan) async throws -> [String] {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = plan.budget
        configuration.incomingBufferHardLimit = plan.budget * 2
        let peers = InMemoryPeers(dialect: plan.dialect, router: log.serialRouter(), serverConfiguration: configuration)
        let endings = NIOLockedValueBox<[Int: [String]]>([:])
        try await peers.run { connection in
            var queued: [(Int, BLIPQueuedRequest)] = []
            for (seq, spec) in plan.requests.enumerated() {
                let request = BLIPRequest(
                    profile: spec.profile,
                    properties: ["Seq": "\(seq)"],
                    body: pattern(spec.size),
                    urgent: spec.urgent,
                    compressed: spec.compressed
                )
                if spec.noReply {
                    try await connection.sendNoReply(request)
                    endings.withLockedValue { $0[seq, default: []].append("sent") }
                    continue
                }
                queued.append((seq, connection.enqueueRequest(request)))
                // Keep at most `window` waiting, taking outcomes in order.
                while queued.count >= plan.window {
                    let (done, request) = queued.removeFirst()
                    let ending = await Self.ending(of: request)
                    endings.withLockedValue { $0[done, default: []].append(ending) }
                }
            }
            for (done, request) in queued {
                let ending = await Self.ending(of: request)
                endings.withLockedValue { $0[done, default: []].append(ending) }
            }
        }
        var failures: [String] = []
        let seen = log.sequence
        let handled = Set(seen)
        if seen != seen.sorted() || handled.count != seen.count { failures.append("handled out of order: \(seen)") }
        if log.numbers != log.numbers.sorted() { failures.append("numbers out of order: \(log.numbers)") }
        if log.mostAtOnce > 1 { failures.append("\(log.mostAtOnce) handlers at once") }
        let recorded = endings.withLockedValue { $0 }
        for seq in 0..<plan.requests.count {
            let ends = recorded[seq] ?? []
            guard ends.count == 1 else {
                failures.append("request \(seq) ended \(ends.count) times: \(ends)")
                continue
            }
            switch ends[0] {
            case "reply", "sent":
                if !handled.contains(seq) { failures.append("request \(seq) answered but never handled") }
            case "busy":
                if handled.contains(seq) { failures.append("request \(seq) both handled and refused") }
            default: failures.append("request \(seq) failed: \(ends[0])")
            }
        }
        let statistics = peers.serverConnection.statistics
        if statistics.peakBufferedIncomingBytes > configuration.incomingBufferHardLimit {
            failures.append("held \(statistics.peakBufferedIncomingBytes) bytes, over the hard limit")
        }
        // The client closed normally: the server's connection has let go of everything.
        for _ in 0..<200 where peers.serverConnection.core.pendingBookkeeping > 0 {
            try await Task.sleep(for: .milliseconds(5))
        }
        if peers.serverConnection.core.pendingBookkeeping > 0 {
            failures.append("left behind: \(peers.serverConnection.stateDescription)")
        }
        return failures
    }

    static func ending(of request: BLIPQueuedRequest) async -> String {
        do {
            _ = try await request.reply()
            return "reply"
        } catch let error as BLIPError where error.code == .busy {
            return "busy"
        } catch {
            return "\(error)"
        }
    }
}
