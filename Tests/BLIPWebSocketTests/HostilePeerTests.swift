import BLIP
import BLIPEngine
import BLIPTestSupport
import BLIPWebSocket
import BLIPWire
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import Synchronization
import Testing

/// A peer that breaks the rules against our server, over a real loopback WebSocket: what the server
/// holds stays within its budgets, it never wedges, and it closes with the code that says who was wrong.
@Suite("Hostile peers against the server", .timeLimit(.minutes(3)))
struct HostilePeerTests {
    static let subprotocols = ["BLIP_3+CBMobile_3"]
    // Bodies made once: a debug build takes a while to make them, on the thread pool the sockets share.
    static let piece8K = pattern(8_192)
    static let piece16K = pattern(16_000)
    static let piece100K = pattern(100_000)

    /// Bodies read piece by piece: the handler ends when its body does.
    static func sinkRouter() -> BLIPRouter {
        var router = standardRouter()
        router.registerStreaming(profile: "stream-sink") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(text: "\(total)")
        }
        return router
    }

    /// 600 streaming handlers at once, more than may run: the server used to stop reading at 512, so the
    /// handlers waited for body bytes that only reading could bring.
    @Test("more streaming requests than handler slots, each waiting for its body, all finish")
    func streamingHandlersBeyondTheLimit() async throws {
        try await withWatchedServer(BLIPWebSocketServer.Configuration.forTests, router: Self.sinkRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop)
                var streams: [BLIPOutgoingID] = []
                for _ in 0..<600 {
                    let (id, _) = try peer.engine.enqueue(
                        BLIPOutgoingMessage(.request, properties: ["Profile": "stream-sink"], body: .streamed)
                    )
                    _ = try peer.engine.appendBody(id, pattern(1_000), isComplete: false)
                    streams.append(id)
                }
                try await peer.flush()
                _ = try peer.engine.enqueue(
                    BLIPOutgoingMessage(.request, properties: ["Profile": "echo"], body: .buffer(pattern(10)))
                )
                try await peer.flush()
                for id in streams { _ = try peer.engine.appendBody(id, pattern(1_000), isComplete: true) }
                try await peer.flush()
                let done = try await peer.read { $0.replies.count == 601 }
                #expect(done, "\(peer.replies.count) of 601 replies")
                #expect(
                    (1...600).allSatisfy { String(buffer: peer.replies[UInt64($0)]?.body ?? ByteBuffer()) == "2000" }
                )
                #expect(
                    String(buffer: peer.replies[601]?.body ?? ByteBuffer()) == pattern(10).getString(at: 0, length: 10)
                )
            }
            let statistics = try #require(server.first).statistics
            #expect(statistics.requestsQueuedForHandler >= 88)
        }
    }

    @Test(
        "a message that goes on past the size limit is refused (413), then cut off with 1009",
        arguments: [false, true]
    )
    func oversizedMessage(repliesEarly: Bool) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.maximumIncomingMessageSize = 1 << 20
        configuration.connection.maximumDrainedBytes = 4 << 20
        configuration.connection.repliesEarlyToOversizedRequests = repliesEarly
        try await withWatchedServer(configuration, router: Self.sinkRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop, handMade: true)
                let frames = HandMadeFrames()
                let closedAfter = SharedCount(-1)
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        // Ignores ACKs and goes on for 24 MiB, unless cut off first. (It stops there so that the
                        // server has read everything when it closes TCP: input left unread would make that
                        // close a reset, which can lose the close frame before this side reads it.)
                        for index in 0..<1_536 {
                            let frame = try frames.request(
                                1,
                                profile: index == 0 ? "stream-sink" : nil,
                                body: Self.piece16K,
                                moreComing: true
                            )
                            do {
                                try await peer.write(frame)
                            } catch {
                                return
                            }
                            if closedAfter.value >= 0 { return }
                        }
                    }
                    _ = try await peer.read { $0.closeCode != nil }
                    closedAfter.value = peer.bytesWritten.load(ordering: .relaxed)
                    try await group.waitForAll()
                }
                #expect(peer.closeCode == 1009)
                // The limit and the drain allowance, then nothing more was taken.
                let read = try #require(server.first).statistics.bytesReceived
                #expect(read > 5 << 20 && read < (5 << 20) + 64_000, "the server read \(read) bytes")
                // Early or not, the request got its 413 before the close.
                #expect(peer.replies[1]?.type == .error && peer.replies[1]?.properties["Error-Code"] == "413")
            }
        }
    }

    /// A peer that sends requests and never reads the replies: the server stops reading its requests once
    /// replies pile up, instead of holding every reply.
    @Test("a peer that never reads its replies is not read either")
    func unreadReplies() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.maximumQueuedReplyBytes = 1 << 20
        // Handlers that lag on a busy machine would pause reading for their own reason: not what is tested.
        configuration.connection.maximumConcurrentHandlers = 100_000
        // Requests waiting for those handlers are held within the buffer budget (64 MiB by default, the
        // whole stream): the bound checked below is the two limits together, plus the sockets' buffers.
        configuration.connection.incomingBufferBudget = 8 << 20
        configuration.connection.incomingBufferHardLimit = 16 << 20
        try await withWatchedServer(configuration, router: standardRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop)  // never reads
                let frames = HandMadeFrames()
                let writer = Task {
                    for number in 1...8_192 {  // 64 MiB of echo requests, if the server read them all
                        try await peer.write(
                            try frames.request(UInt64(number), profile: "echo", body: Self.piece8K, moreComing: false)
                        )
                    }
                }
                // Wait until the server has paused (60 s at most), then until it has read nothing new for a
                // second.
                for _ in 0..<600 where (server.first?.statistics.readPausesForUnreadReplies ?? 0) == 0 {
                    try await Task.sleep(for: .milliseconds(100))
                }
                var lastReceived = -1
                var quietRounds = 0
                for _ in 0..<600 where quietRounds < 10 {
                    try await Task.sleep(for: .milliseconds(100))
                    let received = server.first?.statistics.bytesReceived ?? 0
                    quietRounds = received == lastReceived ? quietRounds + 1 : 0
                    lastReceived = received
                }
                writer.cancel()
                let statistics = try #require(server.first).statistics
                #expect(statistics.readPausesForUnreadReplies >= 1)
                #expect(statistics.bytesReceived < 32 << 20, "the server read \(statistics.bytesReceived) bytes")
            }
        }
    }

    /// A fatal frame after a valid request: the reply, already queued whole, still goes out (past the
    /// window, since no ACK will come), then the close says the peer broke the protocol.
    @Test("before closing on a fatal frame the server writes the replies already queued, then closes with 1002")
    func queuedRepliesBeforeTheClose() async throws {
        var router = BLIPRouter()
        router.register(profile: "big") { _, _ in BLIPResponse(body: pattern(300_000)) }
        try await withWatchedServer(BLIPWebSocketServer.Configuration.forTests, router: router) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop)
                _ = try peer.engine.enqueue(
                    BLIPOutgoingMessage(.request, properties: ["Profile": "big"], body: .buffer(ByteBuffer()))
                )
                try await peer.flush()
                // Its first frames arrive; no ACK goes back, so the rest waits for one.
                let started = try await peer.read { _ in peer.engine.incomingCount == 1 }
                #expect(started)
                try await peer.write(ByteBuffer(bytes: [0xFF, 0xFF]))  // a truncated varint
                _ = try await peer.read { $0.closeCode != nil }
                #expect(peer.closeCode == 1002)
                #expect(peer.replies[1] != nil, "the reply was cut short")
            }
        }
    }

    /// Compressed frames that inflate to far more than they carry: a whole body stops at the budget (the
    /// request is refused with 413 and drained), whatever the compression ratio.
    @Test("a compressed request inflating to 16 MiB stays within a 4 MiB budget and is refused with 413")
    func compressionAmplification() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.incomingBufferBudget = 4 << 20
        configuration.connection.incomingBufferHardLimit = 8 << 20
        configuration.connection.maximumDrainedBytes = 64 << 20
        try await withWatchedServer(configuration, router: standardRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop)
                _ = try peer.engine.enqueue(
                    BLIPOutgoingMessage(
                        .request,
                        properties: ["Profile": "echo"],
                        body: .buffer(ByteBuffer(repeating: 0, count: 16 << 20)),
                        compressed: true
                    )
                )
                // An honest sender: it goes on as ACKs come.
                for _ in 0..<100_000 where peer.replies[1] == nil && peer.closeCode == nil {
                    try await peer.flush()
                    _ = try await peer.read { $0.replies[1] != nil || $0.closeCode != nil || $0.engine.hasFrameToSend }
                }
                #expect(peer.replies[1]?.type == .error && peer.replies[1]?.properties["Error-Code"] == "413")
                let sent = peer.bytesWritten.load(ordering: .relaxed)
                #expect(sent < 1 << 20, "sent \(sent) bytes")
            }
            let statistics = try #require(server.first).statistics
            #expect(statistics.peakBufferedIncomingBytes <= (4 << 20) + (1 << 20))
        }
    }

    @Test("more messages in flight than allowed: 1008")
    func tooManyInFlight() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.maximumIncomingMessagesInFlight = 16
        try await withWatchedServer(configuration, router: Self.sinkRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop, handMade: true)
                let frames = HandMadeFrames()
                for number in 1...17 {
                    try await peer.write(
                        try frames.request(UInt64(number), profile: "echo", body: pattern(100), moreComing: true)
                    )
                }
                _ = try await peer.read { $0.closeCode != nil }
                #expect(peer.closeCode == 1008)
            }
        }
    }

    /// 1 000 messages opened and never finished: past the buffer's hard limit the peer is cut off (1008),
    /// and what the server held never went past it.
    @Test("a peer that opens messages and never finishes them is cut off at the hard limit")
    func unfinishedMessages() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.incomingBufferBudget = 1 << 20
        configuration.connection.incomingBufferHardLimit = 2 << 20
        try await withWatchedServer(configuration, router: standardRouter()) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop, handMade: true)
                let frames = HandMadeFrames()
                let writer = Task {
                    for number in 1...1_000 {
                        try await peer.write(
                            try frames.request(UInt64(number), profile: "echo", body: Self.piece16K, moreComing: true)
                        )
                    }
                }
                _ = try await peer.read { $0.closeCode != nil }
                writer.cancel()
                #expect(peer.closeCode == 1008)
            }
            let statistics = try #require(server.first).statistics
            #expect(statistics.peakBufferedIncomingBytes <= (2 << 20) + 20_000)
        }
    }

    /// Whole requests arriving faster than handlers finish: the server stops reading (nothing it runs waits
    /// for the peer) instead of starting them all, and goes on once they catch up.
    @Test("whole requests faster than the handlers: reading pauses within the budget, every request is answered")
    func slowHandlers() async throws {
        let gate = Gate()
        let running = NIOLockedValueBox((now: 0, most: 0))
        var router = BLIPRouter()
        router.register(profile: "slow") { request, _ in
            running.withLockedValue {
                $0.now += 1
                $0.most = max($0.most, $0.now)
            }
            await gate.wait()
            running.withLockedValue { $0.now -= 1 }
            return BLIPResponse(text: "\(request.body.readableBytes)")
        }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.connection.incomingBufferBudget = 2 << 20
        configuration.connection.incomingBufferHardLimit = 8 << 20
        try await withWatchedServer(configuration, router: router) { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: Self.subprotocols)
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop, handMade: true)
                let frames = HandMadeFrames()
                let writer = Task {
                    for number in 1...200 {
                        try await peer.write(
                            try frames.request(
                                UInt64(number),
                                profile: "slow",
                                body: Self.piece100K,
                                moreComing: false
                            )
                        )
                    }
                }
                // Until the server stops taking requests (60 s at most).
                for _ in 0..<600 where (server.first?.statistics.readPausesForBacklog ?? 0) == 0 {
                    try await Task.sleep(for: .milliseconds(100))
                }
                try await Task.sleep(for: .milliseconds(500))  // what was read with the last batch has started
                let statistics = try #require(server.first).statistics
                #expect(statistics.readPausesForBacklog >= 1)
                #expect(
                    running.withLockedValue { $0.most } <= 40,
                    "\(running.withLockedValue { $0.most }) handlers ran at once"
                )
                gate.open()
                let done = try await peer.read { $0.replies.count == 200 }
                #expect(done)
                try await writer.value
                #expect(try #require(server.first).statistics.peakBufferedIncomingBytes <= 4 << 20)
            }
        }
    }
}

/// A number tasks share.
final class SharedCount: Sendable {
    private let storage: NIOLockedValueBox<Int>

    init(_ value: Int) { self.storage = NIOLockedValueBox(value) }

    var value: Int {
        get { self.storage.withLockedValue { $0 } }
        set { self.storage.withLockedValue { $0 = newValue } }
    }
}
