internal import BLIPEngine
internal import BLIPWire
internal import NIOCore

/// One side of a simulated session: the application and the driver around its engine. It sends planned
/// requests, feeds streamed bodies, answers the peer's requests after a delay, consumes incoming bodies
/// at its own pace, cancels some requests, and records how each request resolved.
final class SimulatedPeer {
    enum Resolution: Equatable {
        case reply
        case errorReply
        case connectionError
        case cancelled
        case sent  // a no-reply request fully handed over
        case failed  // the reply was too large
    }

    struct PlannedMessage {
        var startStep: Int
        var properties: BLIPProperties
        var body: SimulatedBody
        var urgent: Bool
        var compressed: Bool
        var noReply: Bool
        var streamed: Bool
        var streamsReply: Bool
        var cancelStep: Int?
        var kind: BLIPOutgoingMessage.Kind
    }

    struct Sent {
        var simID: String
        var isRequest: Bool
        var expectsReply: Bool
        var urgent: Bool
        var cancelStep: Int?
        var resolution: Resolution?
        var body: SimulatedBody
        var bodyOffset = 0
        var streamed: Bool
        /// The whole body has been handed to the engine.
        var bodyComplete: Bool
        var started = false
        var fullySent = false
    }

    struct Receiving {
        var type: BLIPMessageType
        var simID: String
        var properties: BLIPProperties
        var request: BLIPOutgoingID?
        var expectsReply: Bool
        var urgent: Bool
        var checksum = BLIPRunningChecksum()
        var length = 0
        var unconsumed = 0
        var isComplete = false
    }

    let side: BLIPPeerLink.Side
    unowned let session: SimulatedSession
    var random: SimulationRandom
    var engine: BLIPConnectionEngine { self.session.link.engine(self.side) }

    var planned: [PlannedMessage] = []
    var sent: [BLIPOutgoingID: Sent] = [:]
    var receiving: [BLIPIncomingID: Receiving] = [:]
    /// Replies to give, each inheriting its request's urgency.
    var answers: [(step: Int, number: UInt64, requestSimID: String, urgent: Bool)] = []
    /// Body bytes consumed per step (nil: at once).
    let consumeRate: Int?
    /// For the urgent checks: what was sent while each urgent message waited in the out-box.
    var urgentWaits: [BLIPOutgoingID: UrgentWait] = [:]

    struct UrgentWait {
        var framesPerNormalMessage: [BLIPOutgoingID: Int] = [:]
        var normalFrames = 0
        var otherUrgentFrames = 0
    }
    var isClosed = false
    var nextSimID = 0

    var requestsStarted = 0
    var repliesReceived = 0
    var errorRepliesReceived = 0
    var connectionErrors = 0
    var cancelledCount = 0
    var bodyBytesReceived = 0

    init(side: BLIPPeerLink.Side, session: SimulatedSession, seed: UInt64) {
        self.side = side
        self.session = session
        self.random = SimulationRandom(seed: seed)
        self.consumeRate = self.random.chance(0.5) ? nil : self.random.int(in: 4096...300_000)
        let count = side == .client ? self.random.int(in: 0...6) : self.random.int(in: 0...3)
        for _ in 0..<count {
            let noReply = self.random.chance(0.15)
            self.planned.append(
                PlannedMessage(
                    startStep: self.random.int(in: 1...40),
                    properties: [:],
                    body: self.makeBody(),
                    urgent: self.random.chance(0.3),
                    compressed: self.random.chance(0.5),
                    noReply: noReply,
                    streamed: self.random.chance(0.3),
                    streamsReply: self.random.chance(0.3),
                    cancelStep: self.random.chance(0.12) ? self.random.int(in: 1...200) : nil,
                    kind: .request
                )
            )
        }
        self.planned.sort { $0.startStep < $1.startStep }
    }

    /// Sizes: mostly small, some tens of KiB, a few up to the maximum (4 MiB).
    func makeBody() -> SimulatedBody {
        let maximum = self.session.options.maximumBodySize
        let length: Int
        let roll = self.random.int(in: 0...99)
        if roll < 70 {
            length = self.random.int(in: 0...1024)
        } else if roll < 98 {
            length = self.random.int(in: 1025...80_000)
        } else {
            length = self.random.int(in: 80_001...max(80_001, maximum))
        }
        let kind = SimulatedBody.Kind.allCases[self.random.int(in: 0...2)]
        return SimulatedBody(kind: kind, length: length, seed: self.random.next())
    }

    var incomingIDs: [BLIPIncomingID] {
        self.receiving.filter { !$0.value.isComplete }.map(\.key)
    }

    var isIdle: Bool {
        self.isClosed
            || (self.planned.isEmpty && self.answers.isEmpty && self.receiving.isEmpty
                && self.sent.values.allSatisfy { $0.resolution != nil || ($0.fullySent && !$0.expectsReply) }
                && self.engine.outgoingCount == 0)
    }

    // MARK: - Acting

    func act(step: Int) {
        guard !self.isClosed else { return }
        while let next = self.planned.first, next.startStep <= step {
            self.planned.removeFirst()
            self.start(next)
        }
        for (index, answer) in self.answers.enumerated().reversed() where answer.step <= step {
            self.answers.remove(at: index)
            self.answer(answer.number, requestSimID: answer.requestSimID, urgent: answer.urgent)
        }
        self.feedBodies()
        self.consume()
        self.cancelDue(step: step)
    }

    private func start(_ plan: PlannedMessage) {
        var properties = plan.properties
        let simID = "\(self.side)-\(self.nextSimID)"
        self.nextSimID += 1
        properties["X-Sim"] = simID
        if case .request = plan.kind {
            properties.profile = "sim"
            properties["Content-Type"] = plan.compressed ? "application/json" : "application/octet-stream"
        }
        self.session.registry[simID] = (properties, plan.body, plan.body.checksum)
        let body: BLIPOutgoingMessage.Body =
            plan.streamed ? .streamed : .buffer(plan.body.bytes(0..<plan.body.length))
        let message = BLIPOutgoingMessage(
            plan.kind,
            properties: properties,
            body: body,
            urgent: plan.urgent,
            compressed: plan.compressed,
            noReply: plan.noReply,
            streamsReply: plan.streamsReply
        )
        let isRequest: Bool
        if case .request = plan.kind { isRequest = true } else { isRequest = false }
        do {
            let (id, _) = try self.engine.enqueue(message)
            self.sent[id] = Sent(
                simID: simID,
                isRequest: isRequest,
                expectsReply: isRequest && !plan.noReply,
                urgent: plan.urgent,
                cancelStep: plan.cancelStep,
                body: plan.body,
                bodyOffset: plan.streamed ? 0 : plan.body.length,
                streamed: plan.streamed,
                bodyComplete: !plan.streamed
            )
            if isRequest { self.requestsStarted += 1 }
            if plan.urgent { self.urgentWaits[id] = UrgentWait() }
        } catch {
            self.session.violation("\(self.side) could not queue \(simID): \(error)")
        }
    }

    /// Streamed bodies are fed in chunks of up to 64 KiB while the engine wants more.
    private func feedBodies() {
        for (id, var message) in self.sent where !message.bodyComplete && self.engine.wantsBody(id) {
            let end = min(message.body.length, message.bodyOffset + self.random.int(in: 1...65_536))
            do {
                let isComplete = end == message.body.length
                _ = try self.engine.appendBody(id, message.body.bytes(message.bodyOffset..<end), isComplete: isComplete)
                message.bodyOffset = end
                message.bodyComplete = isComplete
                self.sent[id] = message
            } catch {
                self.session.violation("\(self.side) could not stream \(message.simID): \(error)")
            }
        }
    }

    private func consume() {
        for (id, var message) in self.receiving where message.unconsumed > 0 {
            let count = min(message.unconsumed, self.consumeRate ?? .max)
            message.unconsumed -= count
            _ = self.engine.consumed(id, bytes: count)
            if message.isComplete && message.unconsumed == 0 {
                self.receiving.removeValue(forKey: id)
            } else {
                self.receiving[id] = message
            }
        }
    }

    private func cancelDue(step: Int) {
        for (id, message) in self.sent where message.resolution == nil && (message.cancelStep ?? .max) <= step {
            // A streamed body must be finished once its message has started; cancel those only when whole.
            if message.started && !message.bodyComplete { continue }
            do {
                switch try self.engine.cancel(id) {
                case .removed, .finishing, .replyAbandoned:
                    self.resolve(id, .cancelled)
                case .unknown:
                    break
                }
            } catch {
                self.session.violation("\(self.side) could not cancel \(message.simID): \(error)")
            }
        }
    }

    private func answer(_ number: UInt64, requestSimID: String, urgent: Bool) {
        let isError = self.random.chance(0.2)
        var properties: BLIPProperties = ["X-Reply-To": requestSimID]
        if isError {
            properties[BLIPProperties.errorDomainName] = "Sim"
            properties[BLIPProperties.errorCodeName] = "409"
        }
        self.start(
            PlannedMessage(
                startStep: 0,
                properties: properties,
                body: self.random.chance(0.7)
                    ? SimulatedBody(kind: .text, length: self.random.int(in: 0...200), seed: 1)
                    : self.makeBody(),
                urgent: urgent,
                compressed: self.random.chance(0.5),
                noReply: false,
                streamed: !isError && self.random.chance(0.2),
                streamsReply: false,
                cancelStep: nil,
                kind: isError ? .error(toRequest: number) : .response(toRequest: number)
            )
        )
    }

    // MARK: - Frames and events

    func frameWritten(_ frame: BLIPSentFrame) {
        guard let id = frame.message, let message = self.sent[id] else { return }
        self.sent[id]!.started = true
        if frame.isLastFrame {
            self.sent[id]!.fullySent = true
            if message.isRequest && !message.expectsReply && message.resolution == nil {
                self.resolve(id, .sent)
            }
            if !message.isRequest { self.sent.removeValue(forKey: id) }
        }
        if self.session.options.trace {
            let queued = self.urgentWaits.keys.map { "\($0):\(String(describing: self.engine.status(of: $0)))" }
            print(
                "TRACE \(self.side) frame \(frame.header) len \(frame.length) of \(id) urgent=\(message.urgent) waits=\(queued)"
            )
        }
        self.checkUrgentWaits(after: frame, of: id, isUrgent: message.urgent)
        if frame.isLastFrame { self.urgentWaits.removeValue(forKey: id) }
    }

    /// While an urgent message waits in the out-box, at most one frame of any normal message goes before
    /// it; and once it has started, at most one frame of an already started normal message between two of
    /// its own, plus one for every frame of another urgent message sent meanwhile (LiteCore's rule leaves
    /// one message between urgents). First frames of new messages may go first: they keep request numbers
    /// in order, and an urgent message never passes them when new, nor passes another urgent one.
    private func checkUrgentWaits(after frame: BLIPSentFrame, of sender: BLIPOutgoingID, isUrgent: Bool) {
        for (urgent, var wait) in self.urgentWaits where urgent != sender {
            guard self.engine.status(of: urgent) == .queued else {
                self.urgentWaits[urgent] = UrgentWait()  // paused or starved: not waiting in the queue
                continue
            }
            if isUrgent {
                wait.otherUrgentFrames += 1
            } else {
                wait.framesPerNormalMessage[sender, default: 0] += 1
                if !frame.isFirstFrame { wait.normalFrames += 1 }
                if wait.framesPerNormalMessage[sender]! > 1 {
                    self.session.violation("\(self.side): urgent \(urgent) waited behind 2 frames of \(sender)")
                }
                let started = self.sent[urgent]?.started ?? false
                if started && wait.normalFrames > 1 + wait.otherUrgentFrames {
                    self.session.violation(
                        "\(self.side): started urgent \(urgent) waited behind \(wait.normalFrames) normal frames"
                    )
                }
            }
            self.urgentWaits[urgent] = wait
        }
        if isUrgent { self.urgentWaits[sender] = UrgentWait() }
    }

    func handle(_ event: BLIPEngineEvent) {
        switch event {
        case .messageStarted(let message):
            let simID = message.properties["X-Sim"] ?? "?"
            var receiving = Receiving(
                type: message.type,
                simID: simID,
                properties: message.properties,
                request: message.request,
                expectsReply: message.expectsReply,
                urgent: message.flags.contains(.urgent)
            )
            if let request = message.request, self.sent[request]?.resolution != nil {
                self.session.violation("\(self.side) got a reply for \(request), already resolved")
            }
            self.add(message.body, to: &receiving, complete: message.isComplete)
            self.receiving[message.id] = receiving
            if message.isComplete { self.completed(message.id) }
        case .bodyReceived(let id, let body, let isComplete):
            guard var receiving = self.receiving[id] else {
                self.session.violation("\(self.side) got body for unknown \(id)")
                return
            }
            self.add(body, to: &receiving, complete: isComplete)
            self.receiving[id] = receiving
            if isComplete { self.completed(id) }
        case .messageFailed(let id, let request, let error):
            self.receiving.removeValue(forKey: id)
            if let request { self.resolve(request, .failed) }
            if error.code != .messageTooLarge { self.session.violation("\(self.side): \(id) failed: \(error)") }
        }
    }

    private func add(_ body: ByteBuffer, to message: inout Receiving, complete: Bool) {
        message.checksum.update(body)
        message.length += body.readableBytes
        message.unconsumed += body.readableBytes
        message.isComplete = complete
        self.bodyBytesReceived += body.readableBytes
    }

    /// A message arrived whole: check it against what was sent, then act on it.
    private func completed(_ id: BLIPIncomingID) {
        let message = self.receiving[id]!
        if let expected = self.session.registry[message.simID] {
            if message.properties != expected.properties {
                self.session.violation("\(message.simID): properties \(message.properties) != \(expected.properties)")
            }
            if message.length != expected.body.length || message.checksum.value != expected.checksum {
                self.session.violation(
                    "\(message.simID): body of \(message.length) bytes (crc \(message.checksum.value)) "
                        + "!= \(expected.body.length) (crc \(expected.checksum))"
                )
            }
        } else {
            self.session.violation("\(self.side) received \(id) with unknown X-Sim \(message.simID)")
        }
        if message.type == .request {
            if message.expectsReply {
                self.answers.append((self.random.int(in: 0...20) + 1, id.number, message.simID, message.urgent))
            }
        } else if let request = message.request {
            if message.properties["X-Reply-To"] != self.sent[request]?.simID {
                self.session.violation(
                    "reply \(message.simID) answers \(message.properties["X-Reply-To"] ?? "?"), not \(request)"
                )
            }
            self.resolve(request, message.type == .error ? .errorReply : .reply)
        }
        if message.unconsumed == 0 { self.receiving.removeValue(forKey: id) }
    }

    func resolve(_ id: BLIPOutgoingID, _ resolution: Resolution) {
        guard var message = self.sent[id] else {
            self.session.violation("\(self.side) resolved unknown \(id) as \(resolution)")
            return
        }
        if let previous = message.resolution {
            // A cancelled request's reply is dropped by the engine: nothing else may resolve it again.
            self.session.violation("\(self.side) \(message.simID) resolved twice: \(previous), then \(resolution)")
            return
        }
        message.resolution = resolution
        self.sent[id] = message
        switch resolution {
        case .reply: self.repliesReceived += 1
        case .errorReply: self.errorRepliesReceived += 1
        case .connectionError: self.connectionErrors += 1
        case .cancelled: self.cancelledCount += 1
        case .sent, .failed: break
        }
    }

    func close() {
        guard !self.isClosed else { return }
        self.isClosed = true
        let closure = self.engine.close()
        for id in closure.failedRequests {
            self.resolve(id, .connectionError)
        }
        for id in closure.failedSends {
            if let message = self.sent[id], message.isRequest, !message.expectsReply, message.resolution == nil {
                self.resolve(id, .connectionError)
            }
        }
        self.receiving.removeAll()
        self.answers.removeAll()
        self.planned.removeAll()
    }

    func finalChecks() {
        for (_, message) in self.sent where message.isRequest && message.resolution == nil {
            self.session.violation("\(self.side) request \(message.simID) never resolved")
        }
    }
}
