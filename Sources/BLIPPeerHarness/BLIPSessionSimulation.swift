internal import BLIPEngine
package import BLIPWire
internal import DequeModule
internal import NIOCore

/// One seeded random session between two engines over a ``BLIPPeerLink``: requests both ways with
/// bodies from 0 B to 4 MiB, urgent and normal, compressed or not, no-reply, streamed, cancelled, answered
/// with replies and errors, over a link that may delay, drip-feed, hold or cut frames; with the
/// protocol's invariants checked throughout.
///
/// Invariants checked: every request resolves exactly once (reply, ERR, or connection error; or the
/// cancellation); every delivered message equals what was sent (properties, body length and CRC-32);
/// requests start in number order (1, 2, 3 ... per direction); no frame exceeds its budget; an urgent
/// message never waits behind more than one frame of any normal message; and the bytes a receiver
/// holds for a message stay within the sender's window plus one frame. Replay a failure with its seed.
package struct BLIPSessionSimulation {
    package struct Options: Sendable {
        package var seed: UInt64
        /// The dialect; by default chosen from the seed.
        package var dialect: BLIPDialect?
        package var maximumBodySize = 4 << 20
        /// Simulation steps before the session counts as hung.
        package var maximumSteps = 400_000
        /// Print every frame sent (for replaying a failure).
        package var trace = false

        package init(seed: UInt64, dialect: BLIPDialect? = nil) {
            self.seed = seed
            self.dialect = dialect
        }
    }

    package struct Report: Sendable, CustomStringConvertible {
        package var seed: UInt64
        package var dialect: BLIPDialect = .blip3
        package var violations: [String] = []
        package var requests = 0
        package var replies = 0
        package var errorReplies = 0
        package var connectionErrors = 0
        package var cancelled = 0
        package var framesSent = 0
        package var bodyBytesDelivered = 0
        package var linkWasCut = false
        package var steps = 0

        package var description: String {
            let outcome =
                self.violations.isEmpty ? "ok" : "FAILED: " + self.violations.prefix(5).joined(separator: "; ")
            return "seed \(self.seed) \(self.dialect): \(self.requests) requests, \(self.replies) replies, "
                + "\(self.errorReplies) errors, \(self.connectionErrors) connection errors, \(self.cancelled) cancelled, "
                + "\(self.framesSent) frames, \(self.steps) steps\(self.linkWasCut ? ", link cut" : "") - \(outcome)"
        }
    }

    package static func run(_ options: Options) -> Report {
        var random = SimulationRandom(seed: options.seed)
        var report = Report(seed: options.seed)
        let dialect = options.dialect ?? BLIPDialect.allCases[random.int(in: 0...2)]
        report.dialect = dialect
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.encoder.compressionLevel = random.chance(0.1) ? 0 : Int32(random.int(in: 1...9))
        configuration.sendWindow = random.chance(0.5) ? .fixed(128_000) : .adaptive(initial: 128_000, maximum: 4 << 20)
        var clientConfiguration = configuration
        var serverConfiguration = configuration
        clientConfiguration.consumesRequestBodiesManually = random.chance(0.5)
        serverConfiguration.consumesRequestBodiesManually = random.chance(0.5)
        let link = BLIPPeerLink(client: clientConfiguration, server: serverConfiguration)
        if random.chance(0.3) { link.oneWayDelay = .microseconds(Int64(random.int(in: 100...5000))) }

        let session = SimulatedSession(link: link, random: &random, options: options)
        session.run(report: &report)
        return report
    }
}

/// The state of one simulated session: both peers, the registry of what was sent, and the checks.
final class SimulatedSession {
    let link: BLIPPeerLink
    var random: SimulationRandom
    let options: BLIPSessionSimulation.Options
    var peers: [BLIPPeerLink.Side: SimulatedPeer] = [:]
    var violations: [String] = []
    /// What each message carried, by its `X-Sim` property.
    var registry: [String: (properties: BLIPProperties, body: SimulatedBody, checksum: UInt32)] = [:]

    // Link behaviour.
    let dripFeeds: Bool
    var cutAtDelivery: Int?
    let writeCapacity: [BLIPPeerLink.Side: Int]
    let holdProbability: Double

    init(link: BLIPPeerLink, random: inout SimulationRandom, options: BLIPSessionSimulation.Options) {
        self.link = link
        self.options = options
        self.dripFeeds = random.chance(0.4)
        self.cutAtDelivery = random.chance(0.15) ? random.int(in: 0...60) : nil
        self.writeCapacity = [.client: random.int(in: 1...8), .server: random.int(in: 1...8)]
        self.holdProbability = random.chance(0.3) ? 0.2 : 0
        self.random = SimulationRandom(seed: random.next())
        for side in BLIPPeerLink.Side.allCases {
            self.peers[side] = SimulatedPeer(side: side, session: self, seed: random.next())
        }
    }

    func violation(_ text: String) {
        if self.violations.count < 20 { self.violations.append(text) }
    }

    func run(report: inout BLIPSessionSimulation.Report) {
        let order: [BLIPPeerLink.Side] = [.client, .server]
        var step = 0
        while step < self.options.maximumSteps {
            step += 1
            for side in order { self.peers[side]!.act(step: step) }
            for side in order { self.write(from: side) }
            self.link.advance(by: .microseconds(250))
            if self.holdProbability > 0 {
                self.link.held = Set(order.filter { _ in self.random.chance(self.holdProbability) })
            }
            for side in order { self.deliver(from: side) }
            if let cut = self.cutAtDelivery, self.link.deliveredCount >= cut, !self.link.isCut {
                self.cutLink()
            }
            self.checkMemory()
            if self.isFinished { break }
        }
        report.steps = step
        if !self.isFinished {
            self.violation("session did not finish within \(self.options.maximumSteps) steps")
        }
        for peer in self.peers.values {
            peer.finalChecks()
            report.requests += peer.requestsStarted
            report.replies += peer.repliesReceived
            report.errorReplies += peer.errorRepliesReceived
            report.connectionErrors += peer.connectionErrors
            report.cancelled += peer.cancelledCount
            report.bodyBytesDelivered += peer.bodyBytesReceived
        }
        report.framesSent = self.link.sentFrames.values.reduce(0) { $0 + $1.count }
        report.linkWasCut = self.link.isCut
        self.checkNumbering()
        report.violations = self.violations
    }

    var isFinished: Bool {
        if self.link.isCut { return self.peers.values.allSatisfy { $0.isClosed } }
        return self.peers.values.allSatisfy { $0.isIdle }
            && BLIPPeerLink.Side.allCases.allSatisfy { self.link.framesInFlight(from: $0) == 0 }
            && !self.link.client.hasFrameToSend && !self.link.server.hasFrameToSend
    }

    private func write(from side: BLIPPeerLink.Side) {
        let peer = self.peers[side]!
        guard !peer.isClosed else { return }
        let limit = self.writeCapacity[side]!
        for _ in 0..<limit {
            let frames: [BLIPSentFrame]
            do {
                frames = try self.link.write(from: side, limit: 1)
            } catch {
                self.violation("\(side) failed to write: \(error)")
                self.cutLink()
                return
            }
            guard let frame = frames.first else { return }
            if frame.length > self.link.engine(side).configuration.frameSize {
                self.violation("\(side) wrote a frame of \(frame.length) bytes")
            }
            peer.frameWritten(frame)
        }
    }

    private func deliver(from side: BLIPPeerLink.Side) {
        let receiver = self.peers[side.other]!
        for delivery in self.link.deliver(from: side, limit: self.dripFeeds ? 1 : .max) {
            switch delivery {
            case .received(let result):
                if let event = result.event { receiver.handle(event) }
            case .failed(let error):
                self.violation("\(side.other) rejected a frame from \(side): \(error)")
                self.cutLink()
            }
        }
    }

    func cutLink() {
        self.link.cut()
        for peer in self.peers.values { peer.close() }
    }

    /// A receiver holds at most the sender's window (the largest it has been: what was sent before it shrank
    /// may still be in flight) plus one frame of unconsumed data per message.
    private func checkMemory() {
        guard self.link.client.dialect.hasFlowControl else { return }
        for side in BLIPPeerLink.Side.allCases {
            let receiver = self.link.engine(side)
            let sender = self.link.engine(side.other)
            let bound = sender.peakSendWindowSize + sender.configuration.frameSize
            for id in self.peers[side]!.incomingIDs {
                let held = receiver.unconsumedBytes(of: id)
                if held > bound {
                    self.violation("\(side) holds \(held) unconsumed bytes of \(id), above \(bound)")
                }
            }
        }
    }

    /// Requests begin in number order: their first frames carry 1, 2, 3 ...
    private func checkNumbering() {
        for side in BLIPPeerLink.Side.allCases {
            var expected: UInt64 = 1
            for frame in self.link.sentFrames[side]! where frame.isFirstFrame && frame.header.type == .request {
                if frame.header.messageNumber != expected {
                    self.violation("\(side) began request #\(frame.header.messageNumber) when #\(expected) was due")
                }
                expected = frame.header.messageNumber + 1
            }
        }
    }
}
