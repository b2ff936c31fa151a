import BLIPEngine
import BLIPPeerHarness
import BLIPWire
import NIOCore
import Testing

@Suite("Replies, cancellation, limits and closing")
struct LifecycleTests {
    @Test("replies inherit urgency; no-reply requests are never answered or awaited")
    func repliesAndNoReply() throws {
        let link = BLIPPeerLink()
        _ = try link.client.enqueue(request("u", urgent: true))
        _ = try link.client.enqueue(request("n", noReply: true))
        let events = try link.exchange()
        let received = events[.server]!.compactMap(\.started)
        #expect(received.map(\.expectsReply) == [true, false])
        _ = try link.server.enqueue(BLIPOutgoingMessage(.response(toRequest: 1), properties: [:]))
        #expect(throws: BLIPEngineError.self) {
            try link.server.enqueue(BLIPOutgoingMessage(.response(toRequest: 2), properties: [:]))
        }
        #expect(throws: BLIPEngineError.self, "a second reply to the same request") {
            try link.server.enqueue(BLIPOutgoingMessage(.response(toRequest: 1), properties: [:]))
        }
        try link.exchange()
        let reply = try #require(link.sentFrames[.server]!.last)
        #expect(reply.header.type == .response && reply.header.flags.contains(.urgent))
    }

    @Test("a reply given before the request is complete waits for its last frame (trap 17)")
    func replyHeldUntilRequestComplete() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.frameSize = 1024
        let link = BLIPPeerLink(configuration: configuration)
        _ = try link.client.enqueue(request("big", body: bytes(5000)))
        try link.write(from: .client, limit: 1)
        let first = link.deliver(from: .client)
        guard case .received(let result) = first.first, let head = result.event?.started else {
            Issue.record("no head")
            return
        }
        #expect(!head.isComplete)
        let (reply, wake) = try link.server.enqueue(
            BLIPOutgoingMessage(.response(toRequest: head.id.number), properties: [:])
        )
        #expect(!wake && link.server.status(of: reply) == .held)
        #expect(try link.write(from: .server).isEmpty)
        try link.exchange()
        #expect(link.server.status(of: reply) == nil, "sent once the request completed")
        let replyFrames = link.sentFrames[.server]!.filter { $0.header.type == .response }
        #expect(replyFrames.count == 1)
    }

    @Test("cancelling: an unstarted message is removed, a started one finishes, a sent request's reply is dropped")
    func cancellation() throws {
        let link = BLIPPeerLink()
        let (started, _) = try link.client.enqueue(request("started", body: bytes(100_000)))
        try link.write(from: .client, limit: 1)
        let (unstarted, _) = try link.client.enqueue(request("unstarted"))
        #expect(try link.client.cancel(unstarted) == .removed)
        #expect(try link.client.cancel(started) == .finishing)
        #expect(try link.client.cancel(BLIPOutgoingID(rawValue: 99)) == .unknown)
        var events = try link.exchange()
        let received = events[.server]!.compactMap(\.started)
        #expect(received.map(\.properties.profile) == ["started"], "the unstarted one never went out")
        #expect(received.first?.id.number == 1, "and took no number")
        // The server answers the finished request: the client drops the reply silently.
        _ = try link.server.enqueue(
            BLIPOutgoingMessage(.response(toRequest: 1), properties: [:], body: .buffer(bytes(300_000)))
        )
        events = try link.exchange()
        #expect(events[.client]!.isEmpty)

        let (sent, _) = try link.client.enqueue(request("sent"))
        try link.exchange()
        #expect(try link.client.cancel(sent) == .replyAbandoned)
        _ = try link.server.enqueue(BLIPOutgoingMessage(.error(toRequest: 2), properties: [:]))
        events = try link.exchange()
        #expect(events[.client]!.isEmpty)
        #expect(link.client.awaitingReplyCount == 0 && link.client.incomingCount == 0, "nothing leaks")
    }

    @Test("a streamed body that stops after its first frame forces the connection closed")
    func streamedBodyFailure() throws {
        let link = BLIPPeerLink()
        let (id, _) = try link.client.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "s"], body: .streamed)
        )
        _ = try link.client.appendBody(id, bytes(10), isComplete: false)
        try link.write(from: .client)
        let error = #expect(throws: BLIPEngineError.self) { try link.client.cancel(id) }
        #expect(error?.code == .bodyFailedMidMessage)
    }

    @Test("a request over the size limit is drained and answered ERR BLIP/413; the connection stays up")
    func oversizeRequest() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.maximumIncomingMessageSize = 100_000
        let link = BLIPPeerLink(configuration: configuration)
        let (big, _) = try link.client.enqueue(request("big", body: bytes(250_000)))
        var events = try link.exchange()
        let serverEvents = events[.server]!
        #expect(
            serverEvents.contains {
                if case .messageFailed(_, nil, let error) = $0 { error.code == .messageTooLarge } else { false }
            }
        )
        let reply = try #require(events[.client]!.first?.started)
        #expect(reply.request == big && reply.type == .error)
        #expect(reply.properties["Error-Domain"] == "BLIP" && reply.properties["Error-Code"] == "413")
        #expect(throws: BLIPEngineError.self, "the application can no longer answer it") {
            try link.server.enqueue(BLIPOutgoingMessage(.response(toRequest: 1), properties: [:]))
        }
        _ = try link.client.enqueue(request("after"))
        events = try link.exchange()
        #expect(events[.server]!.first?.started?.properties.profile == "after")
    }

    @Test("a reply over the size limit fails its request; the connection stays up")
    func oversizeReply() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.maximumIncomingMessageSize = 100_000
        let link = BLIPPeerLink(configuration: configuration)
        let (id, _) = try link.client.enqueue(request("download"))
        try link.exchange()
        _ = try link.server.enqueue(
            BLIPOutgoingMessage(.response(toRequest: 1), properties: [:], body: .buffer(bytes(300_000)))
        )
        let events = try link.exchange()
        let failures = events[.client]!.compactMap { event -> BLIPOutgoingID? in
            if case .messageFailed(_, let request, _) = event { return request }
            return nil
        }
        #expect(failures == [id])
        #expect(link.client.incomingCount == 0)
    }

    @Test("closing fails every queued, paused, partly sent and awaited request at once; nothing leaks")
    func closeFailsEverything() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.sendWindow = .fixed(128_000)
        let link = BLIPPeerLink(configuration: configuration)
        let (awaited, _) = try link.client.enqueue(request("awaited"))
        try link.exchange()
        let (paused, _) = try link.client.enqueue(request("paused", body: bytes(1_000_000)))
        link.held = [.server]
        for _ in 0..<20 {
            try link.write(from: .client)
            _ = link.deliver(from: .client)
        }
        #expect(link.client.status(of: paused) == .waitingForACK)
        let (queued, _) = try link.client.enqueue(request("queued"))
        let (noReply, _) = try link.client.enqueue(request("noReply", noReply: true))
        let (streamed, _) = try link.client.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "s"], body: .streamed)
        )
        // The server is partway through a reply and has a request of its own half received.
        _ = try link.server.enqueue(
            BLIPOutgoingMessage(.response(toRequest: 1), properties: [:], body: .buffer(bytes(50_000)))
        )
        // ACKs go first; write until the reply's first frame is on the wire.
        while try link.write(from: .server, limit: 1).first?.header.type.isACK == true {}
        link.held = []
        _ = link.deliver(from: .server)

        link.cut()
        let closure = link.client.close()
        #expect(Set(closure.failedRequests) == [awaited, paused, queued, streamed])
        #expect(Set(closure.failedSends) == [paused, queued, noReply, streamed])
        #expect(closure.incompleteIncoming.count == 1)
        #expect(link.client.outgoingCount == 0 && link.client.awaitingReplyCount == 0 && link.client.incomingCount == 0)
        #expect(!link.client.hasFrameToSend)
        #expect(link.client.close().failedRequests.isEmpty, "closing twice fails nothing twice")
        #expect(throws: BLIPEngineError.self) { try link.client.enqueue(request()) }
    }
}
