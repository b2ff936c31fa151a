import BLIPEngine
import BLIPWire
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// The README's promise as a table: every send API against every way a message can end. Each call returns
/// or throws once, with the outcome the ending implies, within a bounded time, and the connection keeps no
/// bookkeeping for it afterwards. The peer is an engine driven frame by frame (``ScriptedPeer``), so each
/// ending happens at a chosen moment: after the request reached the peer, while a streamed body is still
/// being produced, before a no-reply request has left. Each call also reports its progress: in order, ending
/// in exactly one final report that agrees with the outcome.
@Suite("Exactly once: every send API against every ending", .timeLimit(.minutes(2)))
struct ExactlyOnceTableTests {
    enum API: String, CaseIterable, Sendable {
        case plain, streamedBody, streamedReply, noReply
        /// `sendRequest(_:timeout:progress:onReply:)`; its task's cancellation cancels the returned handle.
        case callback
        /// `enqueueRequest(_:timeout:progress:)`, then `reply()` (whose task's cancellation cancels it).
        case queued
        /// `sendRequests(_:maximumInFlight:timeout:)` with this one request; it takes no progress handler.
        case ordered

        var reportsProgress: Bool { self != .ordered }
    }

    enum Ending: String, CaseIterable, Sendable {
        case reply, smallError, largeError, cancel, peerClose, transportFailure, fatalFrame, localClose
        case encodingFailure, bodyFailure, timeout
        /// A reply over the caller's `maximumIncomingMessageSize` in its first frame: it fails before its
        /// head reaches the connection.
        case oversizedReply

        /// What the caller sees: nil for success.
        func expected(for api: API) -> String? {
            switch self {
            case .reply: nil
            case .smallError, .largeError: api == .noReply ? nil : "BLIPError"
            case .cancel: "CancellationError"
            case .peerClose, .localClose: "connectionClosed"
            case .transportFailure: "transportFailed"
            case .fatalFrame: "protocolViolation"
            case .encodingFailure: "invalidMessage"
            case .bodyFailure: "BodyFailure"
            case .timeout: "timedOut"
            case .oversizedReply: "messageTooLarge"
            }
        }

        func applies(to api: API) -> Bool {
            switch self {
            case .bodyFailure: api == .streamedBody
            case .oversizedReply: api == .plain || api == .callback || api == .queued || api == .ordered
            case .smallError, .largeError: api != .noReply
            default: true
            }
        }
    }

    struct Cell: Sendable, CustomTestStringConvertible {
        var api: API
        var ending: Ending
        var testDescription: String { "\(self.api.rawValue), \(self.ending.rawValue)" }
    }

    static let cells: [Cell] = API.allCases.flatMap { api in
        Ending.allCases.filter { $0.applies(to: api) }.map { Cell(api: api, ending: $0) }
    }

    struct BodyFailure: Error {}

    /// A body of three 40 KB chunks; before the last one it waits for the test to say how it ends.
    struct GatedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let gate: Gate

        func makeAsyncIterator() -> Iterator { Iterator(gate: self.gate) }

        struct Iterator: AsyncIteratorProtocol {
            let gate: Gate
            var sent = 0

            mutating func next() async throws -> ByteBuffer? {
                defer { self.sent += 1 }
                switch self.sent {
                case 0, 1: return ByteBuffer(repeating: 0x62, count: 40_000)
                case 2:
                    guard try await self.gate.passes() else { throw BodyFailure() }
                    return ByteBuffer(repeating: 0x62, count: 40_000)
                default: return nil
                }
            }
        }
    }

    /// Lets a body go on or fail, once the test decides; a cancelled wait throws (a body sequence must
    /// honour cancellation: a call whose connection closed cancels its body and waits for it).
    final class Gate: Sendable {
        private let state = NIOLockedValueBox<(decision: Bool?, waiter: CheckedContinuation<Bool, any Error>?)>(
            (nil, nil)
        )

        func passes() async throws -> Bool {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { continuation in
                    let decided = self.state.withLockedValue { state -> Bool? in
                        if let decision = state.decision { return decision }
                        state.waiter = continuation
                        return nil
                    }
                    if let decided { continuation.resume(returning: decided) }
                }
            } onCancel: {
                let waiter = self.state.withLockedValue { state in
                    defer { state.waiter = nil }
                    return state.waiter
                }
                waiter?.resume(throwing: CancellationError())
            }
        }

        func decide(_ passes: Bool) {
            let waiter = self.state.withLockedValue { state in
                state.decision = passes
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: passes)
        }
    }

    @Test("the call ends once, as the ending says, and leaves nothing behind", arguments: cells)
    func cell(_ cell: Cell) async throws {
        let transport = ManualTransport()
        var configuration = BLIPConnection.Configuration()
        if cell.ending == .oversizedReply { configuration.maximumIncomingMessageSize = 10_000 }
        let connection = BLIPConnection(transport: transport, configuration: configuration)
        let peer = ScriptedPeer(transport: transport)
        let gate = Gate()
        let progress = ProgressLog()
        let replyCalls = NIOLockedValueBox(0)
        var request = BLIPRequest(profile: "table", body: ByteBuffer(repeating: 0x61, count: 1_000))
        if cell.ending == .encodingFailure { request.properties["Bad"] = "a\u{0}b" }

        // With the timeout ending, the peer never answers (a no-reply request never leaves).
        let timeout: Duration? = cell.ending == .timeout ? .milliseconds(300) : nil
        let call = Task { () -> String? in
            do {
                switch cell.api {
                case .plain:
                    _ = try await connection.sendRequest(request, timeout: timeout, progress: progress.record)
                case .streamedBody:
                    _ = try await connection.sendRequest(
                        request,
                        body: GatedBody(gate: gate),
                        timeout: timeout,
                        progress: progress.record
                    )
                case .streamedReply:
                    let reply = try await connection.sendRequestStreamingReply(
                        request,
                        timeout: timeout,
                        progress: progress.record
                    )
                    _ = try await reply.body.collect(upTo: 1 << 20)
                case .noReply:
                    try await connection.sendNoReply(request, timeout: timeout, progress: progress.record)
                case .callback:
                    _ = try await Self.sendWithCallback(
                        request,
                        on: connection,
                        timeout: timeout,
                        progress: progress,
                        calls: replyCalls
                    )
                case .queued:
                    let queued = connection.enqueueRequest(request, timeout: timeout, progress: progress.record)
                    _ = try await queued.reply()
                case .ordered:
                    var outcomes = 0
                    for await result in connection.sendRequests([request], timeout: timeout) {
                        outcomes += 1
                        _ = try result.get()
                    }
                    #expect(outcomes == 1)
                }
                return nil
            } catch let error as BLIPConnectionError {
                return "\(error.code)"
            } catch {
                return "\(type(of: error))"
            }
        }

        if cell.ending != .encodingFailure {
            // The request reaches the peer (a no-reply one stays queued: it must end before it leaves).
            if cell.api != .noReply || cell.ending == .reply {
                let arrived = await self.exchange(peer) { !$0.events.isEmpty }
                // A timeout may pass first on a busy machine: then the request is never sent, which is
                // as right (the table checks the outcome and what is left behind either way).
                #expect(arrived || cell.ending == .timeout, "the request never reached the peer")
            } else {
                await self.settle()
            }
            try await self.end(cell, connection: connection, transport: transport, peer: peer, call: call, gate: gate)
        }

        let outcome = try #require(await self.outcome(of: call, peer: peer, cell: cell))
        #expect(outcome == cell.ending.expected(for: cell.api), "ended with \(outcome ?? "success")")
        // A reply or an ERR reply completes the message; anything else fails it.
        let completes = outcome == nil || outcome == "BLIPError"
        if cell.api.reportsProgress { await progress.check(endsIn: completes ? .complete : .failed) }
        if cell.api == .streamedBody && cell.ending != .bodyFailure { gate.decide(false) }

        // A cancelled (or timed-out) request that had left is still answered by the peer: the connection drops the reply
        // (it has to remember the request until then: BLIP has no cancel frame).
        if cell.ending == .cancel || cell.ending == .timeout, cell.api != .noReply,
            let number = peer.firstRequestNumber
        {
            _ = try? peer.engine.enqueue(
                BLIPOutgoingMessage(.response(toRequest: number), properties: [:], body: .buffer(pattern(10)))
            )
        }
        // Nothing of this request is left: whether the connection is still open or not.
        for _ in 0..<1_000 where connection.core.pendingBookkeeping > 0 {
            _ = await self.exchange(peer) { _ in false }
        }
        #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
        await connection.close()
        if cell.api == .callback {
            #expect(replyCalls.withLockedValue { $0 } == 1, "onReply called \(replyCalls.withLockedValue { $0 }) times")
        }
    }

    /// The callback API, awaited: the first call of `onReply` ends the wait, and every call is counted (a
    /// second one is a failure of the promise). Cancelling the waiting task cancels the request's handle.
    private static func sendWithCallback(
        _ request: BLIPRequest,
        on connection: BLIPConnection,
        timeout: Duration?,
        progress: ProgressLog,
        calls: NIOLockedValueBox<Int>
    ) async throws -> BLIPResponse {
        let handle = NIOLockedValueBox<(pending: BLIPPendingReply?, cancelled: Bool)>((nil, false))
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<BLIPResponse, any Error>) in
                let pending = connection.sendRequest(request, timeout: timeout, progress: progress.record) { result in
                    let first = calls.withLockedValue { count in
                        count += 1
                        return count == 1
                    }
                    if first { continuation.resume(with: result) }
                }
                let cancelled = handle.withLockedValue { state in
                    state.pending = pending
                    return state.cancelled
                }
                if cancelled { pending.cancel() }
            }
        } onCancel: {
            let pending = handle.withLockedValue { state in
                state.cancelled = true
                return state.pending
            }
            pending?.cancel()
        }
    }

    /// Makes the ending happen.
    private func end(
        _ cell: Cell,
        connection: BLIPConnection,
        transport: ManualTransport,
        peer: ScriptedPeer,
        call: Task<String?, Never>,
        gate: Gate
    ) async throws {
        switch cell.ending {
        case .reply, .smallError, .largeError:
            if cell.api == .streamedBody {
                gate.decide(true)
                _ = await self.exchange(peer) { peer in
                    peer.events.contains { if case .bodyReceived(_, _, true) = $0 { true } else { false } }
                }
            }
            guard cell.api != .noReply else { return }
            let size = cell.ending == .largeError ? 600_000 : 100
            let number = try #require(peer.firstRequestNumber)
            let message =
                cell.ending == .reply
                ? BLIPOutgoingMessage(.response(toRequest: number), properties: [:], body: .buffer(pattern(size)))
                : BLIPOutgoingMessage(
                    .error(toRequest: number),
                    properties: ["Error-Domain": "HTTP", "Error-Code": "409"],
                    body: .buffer(pattern(size))
                )
            _ = try peer.engine.enqueue(message)
        case .oversizedReply:
            let number = try #require(peer.firstRequestNumber)
            let reply = BLIPOutgoingMessage(
                .response(toRequest: number),
                properties: [:],
                body: .buffer(pattern(12_000))
            )
            _ = try peer.engine.enqueue(reply)
        case .cancel: call.cancel()
        case .peerClose: transport.peerClosed()
        case .transportFailure: transport.fail(BLIPConnectionError(.transportFailed, "reset"))
        case .fatalFrame: transport.deliver(ByteBuffer(bytes: [0xFF, 0xFF]))
        case .localClose: await connection.close()
        case .bodyFailure: gate.decide(false)
        case .timeout:
            // Nothing moves meanwhile: the time runs out before the peer could answer, or a no-reply
            // request could leave.
            try await Task.sleep(for: .milliseconds(600))
        case .encodingFailure: break
        }
    }

    /// The call's outcome, moving frames both ways while it runs; nil (and an issue) if it never ends.
    private func outcome(of call: Task<String?, Never>, peer: ScriptedPeer, cell: Cell) async -> String?? {
        let finished = NIOLockedValueBox(false)
        let waiter = Task {
            let value = await call.value
            finished.withLockedValue { $0 = true }
            return value
        }
        let ended = await self.exchange(peer, rounds: 20_000) { _ in finished.withLockedValue { $0 } }
        guard ended else {
            Issue.record("\(cell.testDescription): the call did not end")
            call.cancel()
            return nil
        }
        return .some(await waiter.value)
    }

    /// Moves frames both ways until `done`, yielding between rounds (bounded in count).
    private func exchange(_ peer: ScriptedPeer, rounds: Int = 2_000, until done: (ScriptedPeer) -> Bool) async -> Bool {
        for _ in 0..<rounds {
            if done(peer) { return true }
            try? peer.receive()
            try? peer.flush()
            await self.settle()
        }
        return done(peer)
    }

    private func settle() async {
        for _ in 0..<4 { await Task.yield() }
        try? await Task.sleep(for: .milliseconds(1))
    }
}

extension ScriptedPeer {
    /// The number of the first request the peer received.
    var firstRequestNumber: UInt64? {
        for event in self.events {
            if case .messageStarted(let message) = event, message.type == .request { return message.id.number }
        }
        return nil
    }
}

/// Every progress report of one request, checked for the promises of ``BLIPMessageProgress``.
final class ProgressLog: Sendable {
    private let reports = NIOLockedValueBox<[BLIPMessageProgress]>([])

    var all: [BLIPMessageProgress] { self.reports.withLockedValue { $0 } }

    @Sendable func record(_ progress: BLIPMessageProgress) {
        self.reports.withLockedValue { $0.append(progress) }
    }

    /// Waits (at most 5 s: the final report may come just after the call ended) for the final report, then
    /// checks that it is `final`, that it is the only final one and the last, and that no value went down.
    func check(endsIn final: BLIPMessageProgress.State, sourceLocation: SourceLocation = #_sourceLocation) async {
        for _ in 0..<500 where !(self.all.last?.state.isFinal ?? false) {
            try? await Task.sleep(for: .milliseconds(10))
        }
        let reports = self.all
        #expect(reports.last?.state == final, "\(reports)", sourceLocation: sourceLocation)
        #expect(reports.filter(\.state.isFinal).count == 1, "\(reports)", sourceLocation: sourceLocation)
        for (earlier, later) in zip(reports, reports.dropFirst()) {
            let grows =
                earlier.state <= later.state && earlier.bytesSent <= later.bytesSent
                && earlier.bytesAcknowledged <= later.bytesAcknowledged
                && earlier.replyBytesReceived <= later.replyBytesReceived
            #expect(grows && earlier != later, "\(earlier) then \(later)", sourceLocation: sourceLocation)
        }
    }
}
