package import BLIP
internal import DequeModule
internal import NIOCore

/// One session between two whole connections (``BLIPSteppedConnection``: the production rules, no tasks,
/// no I/O), stepped by a choice source: the seeded suite, or the `connection` fuzz target.
///
/// Each side has its own limits (frame size, buffer budget, handler slots, incoming-request buffer, what
/// happens to unknown profiles) and handler order. Steps send requests both ways (held by a handler,
/// answered at once, unknown, no-reply), move frames one at a time (pulled only after the connection asked
/// to write, delivered only while its reading is not paused), finish handlers in any order with a reply or
/// an ERR, take, answer or drop unhandled requests, cancel requests, begin a graceful close, close either
/// side or cut the link. Then the session settles (every handler finished, every frame moved) and closes.
///
/// Checked after every step: no connection closes on its own (its peer is well-behaved: no protocol error,
/// no limit exceeded, no stall); what a connection holds stays within its hard limit; handler slots are
/// never exceeded; in serial order, handlers start in request-number order, one at a time. Checked for
/// every request: it ends exactly once (its reply callback is called once), in a way its fate allows (the
/// echo of what was sent, the ERR its handler chose, 404/501/503, a connection error only once the
/// connection is closing, a cancellation only if cancelled). Checked at the end: once settled, both sides
/// are quiet with no bookkeeping left and nothing buffered; once closed, every request has ended and
/// neither side keeps bookkeeping.
package struct ConnectionPairSimulation {
    package struct Report: Sendable, CustomStringConvertible {
        package var dialect: BLIPDialect = .blip3
        package var violations: [String] = []
        package var steps = 0
        package var requests = 0
        package var noReplyRequests = 0
        package var replies = 0
        package var errorReplies = 0
        package var connectionErrors = 0
        package var cancelled = 0
        package var framesMoved = 0
        package var readPauses = 0
        package var busyRefusals = 0
        package var gracefulCloses = 0
        /// Replies from streamed handlers that read their whole body.
        package var streamedWhole = 0
        /// How the session ended: "settled", "closed by client", "closed by server", "link cut".
        package var ending = ""

        package init() {}

        /// Adds `other`'s counters to these (for totals over many sessions; violations and ending stay).
        package mutating func add(_ other: Report) {
            self.steps += other.steps
            self.requests += other.requests
            self.noReplyRequests += other.noReplyRequests
            self.replies += other.replies
            self.errorReplies += other.errorReplies
            self.connectionErrors += other.connectionErrors
            self.cancelled += other.cancelled
            self.framesMoved += other.framesMoved
            self.readPauses += other.readPauses
            self.busyRefusals += other.busyRefusals
            self.gracefulCloses += other.gracefulCloses
            self.streamedWhole += other.streamedWhole
        }

        package var description: String {
            let outcome =
                self.violations.isEmpty ? "ok" : "FAILED: " + self.violations.prefix(5).joined(separator: "; ")
            return
                "\(self.dialect): \(self.steps) steps, \(self.requests) requests (\(self.noReplyRequests) no-reply), "
                + "\(self.replies) replies, \(self.errorReplies) ERR, \(self.connectionErrors) connection errors, "
                + "\(self.cancelled) cancelled, \(self.framesMoved) frames, \(self.readPauses) read pauses, "
                + "\(self.busyRefusals) busy, \(self.gracefulCloses) graceful closes, \(self.streamedWhole) streamed "
                + "bodies read whole, \(self.ending) - \(outcome)"
        }
    }

    /// Runs one session from `seed`.
    package static func run(seed: UInt64, maximumSteps: Int = 600, trace: Bool = false) -> Report {
        var random = SimulationRandom(seed: seed)
        return Self.run(choices: &random, maximumSteps: maximumSteps, trace: trace)
    }

    /// Runs one session whose every choice comes from `choices`; `trace` prints every step (to replay a
    /// failure).
    package static func run(
        choices: inout some ConnectionPairChoices,
        maximumSteps: Int,
        trace: Bool = false
    ) -> Report {
        let session = ConnectionPairSession(choices: &choices)
        session.trace = trace
        return session.run(choices: &choices, maximumSteps: maximumSteps)
    }
}

/// A request one side sent, and how it ended (its reply callback's calls).
private final class SentRecord: @unchecked Sendable {
    let tag: String
    let profile: String
    let body: ByteBuffer
    let expectsReply: Bool
    var handle: BLIPSteppedConnection.SentRequest?
    var endings: [Result<BLIPResponse, any Error>] = []
    var cancelled = false
    var timedOut = false
    /// Its progress reports, if it asked for them.
    var progress: [BLIPMessageProgress]?
    /// The connection was closing (or the link cut) when it ended.
    var endedWhileClosing = false

    init(tag: String, profile: String, body: ByteBuffer, expectsReply: Bool) {
        self.tag = tag
        self.profile = profile
        self.body = body
        self.expectsReply = expectsReply
    }
}

/// One end of the pair, with the limits it was given.
private final class PairSide {
    let name: String
    let connection: BLIPSteppedConnection
    let configuration: BLIPConnection.Configuration
    let isSerial: Bool
    /// Frames on their way to this side.
    var inbox: Deque<ByteBuffer> = []
    var sent: [SentRecord] = []
    /// Requests no handler took, taken by the application and not answered yet.
    var unhandled: [BLIPIncomingRequest] = []
    var wasPaused = false
    /// Whether the network has room: while it has none, the transport writes nothing.
    var isWritable = true
    /// A graceful close's drain has begun: once quiet, the side closes.
    var isDraining = false
    /// What streamed handlers have read of their request bodies, by request number, and whether to the end.
    var streamedBodies: [UInt64: (body: ByteBuffer, isWhole: Bool)] = [:]

    init(
        name: String,
        dialect: BLIPDialect,
        sharedBudget: SharedBufferBudget?,
        choices: inout some ConnectionPairChoices
    ) {
        self.name = name
        var configuration = BLIPConnection.Configuration()
        configuration.frameSize = choices.one(of: [512, 1024, 4096, 16_384])
        if choices.chance(70) {
            configuration.incomingBufferBudget = choices.one(of: [4 << 10, 16 << 10, 64 << 10])
        }
        configuration.maximumConcurrentHandlers = 1 + choices.pick(4)
        configuration.incomingRequestBufferSize = 1 + choices.pick(6)
        configuration.unhandledRequests = choices.chance(50) ? .deliver : .respondNotFound
        if choices.chance(30) { configuration.compressionLevel = 0 }
        if choices.chance(30) { configuration.maximumQueuedReplyBytes = choices.one(of: [1 << 10, 8 << 10]) }
        configuration.sharedBudget = sharedBudget
        self.configuration = configuration
        self.isSerial = choices.chance(50)
        self.connection = BLIPSteppedConnection(
            dialect: dialect,
            configuration: configuration,
            handlerOrder: self.isSerial ? .serial : .concurrent
        )
    }

    var handlerSlots: Int { self.isSerial ? 1 : self.configuration.maximumConcurrentHandlers }

    /// The largest body it reads whole: a larger request is answered ERR 413, a larger reply fails.
    var wholeBodyLimit: Int {
        min(self.configuration.maximumIncomingMessageSize, self.configuration.incomingBufferBudget)
    }
}

/// Stepped on one thread; reply callbacks run on it, within the step that ends their request.
private final class ConnectionPairSession: @unchecked Sendable {
    let dialect: BLIPDialect
    let sides: [PairSide]
    var report = Report()
    var nextTag = 0
    /// A close or a cut has begun: connection errors are allowed from now on.
    var isClosing = false
    var isClosed = false
    var trace = false

    typealias Report = ConnectionPairSimulation.Report

    init(choices: inout some ConnectionPairChoices) {
        self.dialect = BLIPDialect.allCases[choices.pick(BLIPDialect.allCases.count)]
        // Sometimes both count against one budget, as a process's connections do.
        let shared = choices.chance(20) ? SharedBufferBudget(limit: choices.one(of: [8 << 10, 32 << 10])) : nil
        self.sides = [
            PairSide(name: "client", dialect: self.dialect, sharedBudget: shared, choices: &choices),
            PairSide(name: "server", dialect: self.dialect, sharedBudget: shared, choices: &choices),
        ]
        self.report.dialect = self.dialect
    }

    func run(choices: inout some ConnectionPairChoices, maximumSteps: Int) -> Report {
        let steps = min(maximumSteps, 40 + choices.pick(maximumSteps))
        for side in self.sides {
            self.log(
                "\(side.name): frames \(side.configuration.frameSize) B, budget \(side.configuration.incomingBufferBudget) B, "
                    + "\(side.isSerial ? "serial" : "concurrent") x\(side.handlerSlots), unhandled \(side.configuration.unhandledRequests)"
            )
        }
        for _ in 0..<steps where !self.isClosed && self.report.violations.isEmpty && !choices.isExhausted {
            self.step(&choices)
            self.report.steps += 1
            self.check()
        }
        if !self.isClosed && self.report.violations.isEmpty {
            self.settle()
            self.checkSettled()
            self.closeNormally(self.sides[0])
            self.report.ending = "settled"
        }
        self.checkClosed()
        return self.report
    }

    // MARK: - Steps

    private func step(_ choices: inout some ConnectionPairChoices) {
        let side = self.sides[choices.pick(2)]
        let roll = choices.pick(100)
        if self.trace { print("step \(self.report.steps): \(side.name) roll \(roll)") }
        switch roll {
        case 0..<22: self.send(from: side, &choices)
        case 22..<50: self.pull(side)
        case 50..<76: self.deliver(to: side, count: 1 + choices.pick(3))
        case 76..<84: self.finishHandler(on: side, &choices)
        case 84..<88: self.readStreamedBody(on: side, &choices)
        case 88..<92: self.answerUnhandled(on: side, &choices)
        case 92..<96: self.cancel(from: side, &choices)
        case 96:
            if choices.chance(25) {
                self.log("\(side.name) begins a graceful close")
                side.isDraining = true
                side.connection.beginGracefulClose()
            }
        case 97: if choices.chance(20) { self.closeNormally(side) }
        case 98: if choices.chance(10) { self.cutLink() }
        default: self.setWritable(side, !side.isWritable)
        }
        // A graceful close ends once nothing is in flight.
        for side in self.sides where side.isDraining && !self.isClosed && side.connection.isQuiet {
            self.report.gracefulCloses += 1
            self.closeNormally(side)
        }
        self.completeRequestedCloses()
    }

    private func send(from side: PairSide, _ choices: inout some ConnectionPairChoices) {
        let profile = choices.one(of: [
            BLIPSteppedConnection.heldProfile, BLIPSteppedConnection.heldProfile, BLIPSteppedConnection.echoProfile,
            BLIPSteppedConnection.streamingProfile, "unknown",
        ])
        let size = choices.chance(80) ? choices.pick(3_000) : choices.pick(40_000)
        let tag = "\(side.name)-\(self.nextTag)"
        self.nextTag += 1
        var body = ByteBuffer()
        body.writeRepeatingByte(UInt8(truncatingIfNeeded: self.nextTag), count: size)
        let request = BLIPRequest(
            profile: profile,
            properties: ["Tag": tag],
            body: body,
            urgent: choices.chance(20),
            compressed: choices.chance(30)
        )
        let expectsReply = choices.chance(85)
        let record = SentRecord(tag: tag, profile: profile, body: body, expectsReply: expectsReply)
        self.log("send \(tag) \(profile) \(size) B\(expectsReply ? "" : " no-reply")")
        self.report.requests += 1
        guard expectsReply else {
            self.report.noReplyRequests += 1
            _ = side.connection.sendNoReply(request)
            return
        }
        side.sent.append(record)
        var progress: BLIPProgressHandler?
        if choices.chance(50) {
            record.progress = []
            progress = { record.progress?.append($0) }
        }
        record.handle = side.connection.send(request, progress: progress) { [weak self] result in
            record.endings.append(result)
            record.endedWhileClosing = self?.isClosing ?? true
        }
    }

    private func setWritable(_ side: PairSide, _ isWritable: Bool) {
        guard isWritable != side.isWritable else { return }
        self.log("\(side.name) \(isWritable ? "has room to write again" : "cannot write")")
        side.isWritable = isWritable
        side.connection.writabilityChanged(isWritable)
    }

    /// Moves one frame toward the peer, if the side asked to write and the network has room.
    private func pull(_ side: PairSide) {
        guard side.isWritable, side.connection.wantsToWrite, let frame = side.connection.pullFrame() else { return }
        self.peer(of: side).inbox.append(frame)
        self.report.framesMoved += 1
    }

    private func deliver(to side: PairSide, count: Int) {
        for _ in 0..<count {
            guard !side.connection.isReadingPaused, let frame = side.inbox.popFirst() else { return }
            self.log("\(side.name) receives \(frame.readableBytes) B")
            side.connection.receive(frame)
        }
    }

    private func finishHandler(on side: PairSide, _ choices: inout some ConnectionPairChoices) {
        let running = side.connection.running
        guard !running.isEmpty else { return }
        let call = running[choices.pick(running.count)]
        self.finish(call, on: side, withError: choices.chance(15))
    }

    /// Ends a handler: its reply echoes the request's tag and what it read of the body (a streamed
    /// handler's reply says whether that was all of it), or it answers ERR 400 with the tag.
    private func finish(_ call: BLIPSteppedConnection.HandlerCall, on side: PairSide, withError: Bool) {
        let tag = call.request.properties["Tag"] ?? ""
        self.log("\(side.name) finishes #\(call.number) (\(tag))")
        var reply = BLIPResponse(properties: ["Tag": tag], body: call.request.body)
        if call.isStreamed {
            let read = side.streamedBodies.removeValue(forKey: call.number)
            reply.body = read?.body ?? ByteBuffer()
            reply.properties["Whole"] = read?.isWhole == true ? "yes" : "no"
        }
        if withError {
            side.connection.finishHandler(call, with: .failure(BLIPError(code: .badRequest, message: tag)))
        } else {
            side.connection.finishHandler(call, with: .success(reply))
        }
    }

    /// A streamed handler reads what has arrived of its body (all of it, or one piece). Returns whether it
    /// read anything.
    @discardableResult
    private func readStreamedBody(
        _ call: BLIPSteppedConnection.HandlerCall,
        on side: PairSide,
        all: Bool
    ) -> Bool {
        var read = side.streamedBodies[call.number] ?? (ByteBuffer(), false)
        var progressed = false
        while !read.isWhole {
            switch side.connection.readBody(of: call) {
            case .piece(var piece):
                read.body.writeBuffer(&piece)
                progressed = true
            case .end:
                read.isWhole = true
                progressed = true
            case .failed(let error):
                self.violation("\(side.name)'s streamed request #\(call.number) failed while open: \(error)")
                read.isWhole = true
            case .nothingYet:
                side.streamedBodies[call.number] = read
                return progressed
            }
            if !all { break }
        }
        side.streamedBodies[call.number] = read
        return progressed
    }

    private func readStreamedBody(on side: PairSide, _ choices: inout some ConnectionPairChoices) {
        let streamed = side.connection.running.filter(\.isStreamed)
        guard !streamed.isEmpty else { return }
        self.readStreamedBody(streamed[choices.pick(streamed.count)], on: side, all: choices.chance(50))
    }

    private func answerUnhandled(on side: PairSide, _ choices: inout some ConnectionPairChoices) {
        if choices.chance(60), let request = side.connection.takeUnhandledRequest() {
            side.unhandled.append(request)
        }
        guard !side.unhandled.isEmpty else { return }
        let request = side.unhandled.remove(at: choices.pick(side.unhandled.count))
        self.log("\(side.name) answers or drops unhandled #\(request.number)")
        guard request.expectsReply, choices.chance(85) else { return }  // dropped: it answers 501 itself
        let tag = request.request.properties["Tag"] ?? ""
        try? request.respond(BLIPResponse(properties: ["Tag": tag], body: request.request.body))
    }

    private func cancel(from side: PairSide, _ choices: inout some ConnectionPairChoices) {
        let open = side.sent.filter { $0.endings.isEmpty && $0.handle != nil }
        guard !open.isEmpty else { return }
        let record = open[choices.pick(open.count)]
        if choices.chance(50) {
            record.cancelled = true
            self.log("cancel \(record.tag)")
            side.connection.cancel(record.handle!)
        } else {
            record.timedOut = true
            self.log("\(record.tag) times out")
            side.connection.timeOut(record.handle!)
        }
    }

    // MARK: - Closing

    private func closeNormally(_ side: PairSide) {
        side.connection.close(side === self.sides[0] ? .normalClosure : .goingAway)
        self.completeRequestedCloses()
    }

    /// Carries out a close a connection asked its transport for: the WebSocket close handshake, with the
    /// frames still in flight dropped. A close the harness did not ask for is a violation.
    private func completeRequestedCloses() {
        guard !self.isClosed else { return }
        for side in self.sides {
            guard let reason = side.connection.closeRequest else { continue }
            if !reason.code.isNormal {
                self.report.violations.append("\(side.name) closed on its own: \(reason)")
            }
            self.isClosing = true
            self.report.ending = "closed by \(side.name)"
            side.connection.transportClosed(nil)
            self.peer(of: side).connection.transportClosed(
                BLIPCloseStatus(code: reason.code, reason: reason.reason, initiator: .peer)
            )
            self.endClosed()
            return
        }
    }

    private func cutLink() {
        self.isClosing = true
        self.report.ending = "link cut"
        for side in self.sides {
            side.connection.transportClosed(
                BLIPCloseStatus(code: .abnormalClosure, reason: "link cut", initiator: .transport)
            )
        }
        self.endClosed()
    }

    /// After the close: handler tasks end (their replies go nowhere), frames in flight are lost, and
    /// requests taken from the buffer are let go of.
    private func endClosed() {
        self.isClosed = true
        for side in self.sides {
            for call in side.connection.running {
                side.connection.finishHandler(call, with: .failure(BLIPError(code: .busy, message: "closed")))
            }
            side.inbox.removeAll()
            side.unhandled.removeAll()
            side.streamedBodies.removeAll()
            while side.connection.takeUnhandledRequest() != nil {}
        }
    }

    // MARK: - Settling

    /// Finishes every handler, answers every request and moves every frame until nothing moves.
    private func settle() {
        for side in self.sides { self.setWritable(side, true) }
        for _ in 0..<100_000 {
            var moved = false
            for side in self.sides {
                for call in side.connection.running {
                    // A streamed handler reads to its body's end before it replies, as far as frames have come.
                    if call.isStreamed {
                        if self.readStreamedBody(call, on: side, all: true) { moved = true }
                        guard side.streamedBodies[call.number]?.isWhole == true else { continue }
                    }
                    moved = true
                    self.finish(call, on: side, withError: false)
                }
                while let request = side.connection.takeUnhandledRequest() { side.unhandled.append(request) }
                for request in side.unhandled where request.expectsReply {
                    let tag = request.request.properties["Tag"] ?? ""
                    try? request.respond(BLIPResponse(properties: ["Tag": tag], body: request.request.body))
                }
                if !side.unhandled.isEmpty { moved = true }
                side.unhandled.removeAll()
                while side.connection.wantsToWrite, let frame = side.connection.pullFrame() {
                    self.peer(of: side).inbox.append(frame)
                    self.report.framesMoved += 1
                    moved = true
                }
                while !side.connection.isReadingPaused, let frame = side.inbox.popFirst() {
                    self.log("settling: \(side.name) receives \(frame.readableBytes) B")
                    side.connection.receive(frame)
                    moved = true
                }
            }
            self.completeRequestedCloses()
            self.check()
            if self.isClosed { break }
            if !moved {
                // Streamed handlers still waiting for the rest of their bodies: reply with what they have.
                let waiting = self.sides.flatMap { side in side.connection.running.map { (side, $0) } }
                if waiting.isEmpty { break }
                for (side, call) in waiting { self.finish(call, on: side, withError: false) }
            }
        }
    }

    // MARK: - Checks

    private func log(_ text: @autoclosure () -> String) {
        if self.trace { print(text()) }
    }

    private func violation(_ text: String) {
        if self.report.violations.count < 20 { self.report.violations.append(text) }
    }

    /// After every step.
    private func check() {
        for side in self.sides where side.connection.closeStatus == nil {
            let connection = side.connection
            if connection.isReadingPaused && !side.wasPaused { self.report.readPauses += 1 }
            side.wasPaused = connection.isReadingPaused
            let buffered = connection.bufferedBytes
            if buffered > side.configuration.incomingBufferHardLimit {
                self.violation("\(side.name) holds \(buffered) bytes, over its hard limit")
            }
            if connection.running.count > side.handlerSlots {
                self.violation("\(side.name) runs \(connection.running.count) handlers in \(side.handlerSlots) slots")
            }
            if side.isSerial {
                let started = connection.started
                if zip(started, started.dropFirst()).contains(where: { $0 >= $1 }) {
                    self.violation("\(side.name)'s serial handlers started out of order: \(started.suffix(8))")
                }
            }
        }
        for side in self.sides {
            for record in side.sent where record.endings.count > 1 {
                self.violation("\(record.tag) ended \(record.endings.count) times")
            }
        }
    }

    /// Once settled: nothing left anywhere.
    private func checkSettled() {
        guard !self.isClosed else { return }
        for side in self.sides {
            let connection = side.connection
            if !side.inbox.isEmpty {
                self.violation(
                    "\(side.name) stalled with \(side.inbox.count) frames unread (paused: \(connection.isReadingPaused))"
                )
            }
            if connection.wantsToWrite { self.violation("\(side.name) still wants to write once settled") }
            if !connection.isQuiet {
                self.violation("\(side.name) is not quiet once settled: \(connection.stateDescription)")
            }
            if connection.pendingBookkeeping != 0 {
                self.violation("\(side.name) keeps \(connection.pendingBookkeeping) bookkeeping entries once settled")
            }
            if connection.bufferedBytes != 0 {
                self.violation("\(side.name) still holds \(connection.bufferedBytes) bytes once settled")
            }
            for record in side.sent where record.endings.isEmpty {
                self.violation("\(record.tag) (\(record.profile)) never ended once settled")
            }
        }
    }

    /// Once closed: every request ended, as its fate allows, and nothing is left.
    private func checkClosed() {
        for side in self.sides {
            let connection = side.connection
            if connection.closeStatus == nil { self.violation("\(side.name) is not closed") }
            if connection.pendingBookkeeping != 0 {
                self.violation("\(side.name) keeps \(connection.pendingBookkeeping) bookkeeping entries once closed")
            }
            for record in side.sent {
                guard let ending = record.endings.first else {
                    self.violation("\(record.tag) (\(record.profile)) never ended")
                    continue
                }
                self.checkEnding(record, ending, side: side)
            }
        }
    }

    /// Progress reports come in order, growing, with exactly one final state, last: complete if the reply
    /// (or an ERR) arrived whole, else failed.
    private func checkProgress(_ record: SentRecord, _ ending: Result<BLIPResponse, any Error>) {
        guard let reports = record.progress else { return }
        let states = reports.map(\.state)
        let arrivedWhole: Bool
        switch ending {
        case .success: arrivedWhole = true
        case .failure(let error): arrivedWhole = error is BLIPError
        }
        let grows = zip(reports, reports.dropFirst()).allSatisfy { earlier, later in
            earlier.state <= later.state && earlier.bytesSent <= later.bytesSent
                && earlier.replyBytesReceived <= later.replyBytesReceived
        }
        if !grows || states.filter(\.isFinal).count != 1 || states.last != (arrivedWhole ? .complete : .failed) {
            self.violation("\(record.tag)'s progress, ending \(ending): \(states)")
        }
    }

    private func checkEnding(_ record: SentRecord, _ ending: Result<BLIPResponse, any Error>, side: PairSide) {
        self.checkProgress(record, ending)
        let peer = self.peer(of: side)
        let size = record.body.readableBytes
        switch ending {
        case .success(let response):
            self.report.replies += 1
            if response.properties["Whole"] == "yes" { self.report.streamedWhole += 1 }
            let body = response.body.readableBytesView
            let matches =
                response.properties["Whole"] == "no"
                ? record.body.readableBytesView.starts(with: body) : response.body == record.body
            if response.properties["Tag"] != record.tag || !matches {
                self.violation("\(record.tag) got the reply to \(response.properties["Tag"] ?? "another request")")
            }
        case .failure(let error as BLIPError):
            self.report.errorReplies += 1
            switch error.code {
            case .badRequest where error.message == record.tag: break
            case .notFound
            where record.profile == "unknown" && peer.configuration.unhandledRequests == .respondNotFound:
                break
            case .handlerFailed where record.profile == "unknown" && peer.configuration.unhandledRequests == .deliver:
                break
            case .payloadTooLarge where size > peer.wholeBodyLimit: break
            case .busy: self.report.busyRefusals += 1
            default:
                self.violation(
                    "\(record.tag) (\(record.profile)) got an unexpected ERR \(error.code.rawValue): \(error.message)"
                )
            }
        case .failure(is CancellationError):
            self.report.cancelled += 1
            if !record.cancelled { self.violation("\(record.tag) was cancelled by no one") }
        case .failure(let error as BLIPConnectionError):
            self.report.connectionErrors += 1
            let replyTooLarge = error.code == .messageTooLarge && size > side.wholeBodyLimit
            let timedOut = error.code == .timedOut && record.timedOut
            if !record.endedWhileClosing && !replyTooLarge && !timedOut {
                self.violation("\(record.tag) failed while open: \(error)")
            }
        case .failure(let error):
            self.violation("\(record.tag) failed with \(error)")
        }
    }

    private func peer(of side: PairSide) -> PairSide {
        side === self.sides[0] ? self.sides[1] : self.sides[0]
    }
}
