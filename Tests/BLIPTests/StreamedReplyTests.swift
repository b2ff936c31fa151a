import BLIPEngine
import BLIPTestSupport
import BLIPWire
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// Replies whose body is an AsyncSequence (``BLIPResponse/init(properties:bodyStream:compressed:)``):
/// pulled under flow control, never ahead of the reader by more than the window, and failing the way a
/// streamed request body does.
@Suite("Streamed replies", .timeLimit(.minutes(2)))
struct StreamedReplyTests {
    /// Serves `download` (a streamed reply of `Size` bytes in `Chunk`-byte pieces), `upload-download` (a
    /// streaming handler that reads the request, then streams back as many bytes) and `echo`.
    static func router(meter: BodyMeter) -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "download") { request, _ in
            let total = Int(request.properties["Size"] ?? "") ?? 0
            let chunk = Int(request.properties["Chunk"] ?? "") ?? 10_000
            return BLIPResponse(
                properties: ["Kind": "streamed"],
                bodyStream: MeteredBody(total: total, chunk: chunk, meter: meter),
                compressed: request.properties["Compress"] == "yes"
            )
        }
        router.registerStreaming(profile: "upload-download") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(bodyStream: MeteredBody(total: total, chunk: 7_000, meter: meter))
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        return router
    }

    /// A client and a server (routed by `router`) over the in-memory transport, each running in a task until
    /// it closes.
    static func runningPair(serverRouter router: BLIPRouter) -> (
        client: BLIPConnection, server: BLIPConnection,
        clientRun: Task<BLIPCloseStatus, Never>, serverRun: Task<BLIPCloseStatus, Never>
    ) {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair()
        let server = BLIPConnection(transport: serverEnd, router: router)
        let client = BLIPConnection(transport: clientEnd)
        return (client, server, Task { await client.run() }, Task { await server.run() })
    }

    static func download(_ size: Int, chunk: Int = 10_000, compress: Bool = false) -> BLIPRequest {
        BLIPRequest(
            profile: "download",
            properties: ["Size": "\(size)", "Chunk": "\(chunk)", "Compress": compress ? "yes" : "no"]
        )
    }

    @Test(
        "a streamed reply, read whole and piece by piece, from a handler and a streaming handler",
        arguments: BLIPDialect.allCases
    )
    func readWholeAndInPieces(dialect: BLIPDialect) async throws {
        let meter = BodyMeter()
        let peers = InMemoryPeers(dialect: dialect, router: Self.router(meter: meter))
        try await peers.run { connection in
            for size in [0, 1, 300_000] {
                let whole = try await connection.sendRequest(Self.download(size))
                #expect(whole.properties["Kind"] == "streamed")
                #expect(whole.body == MeteredBody.expected(total: size, chunk: 10_000))

                let streamed = try await connection.sendRequestStreamingReply(Self.download(size))
                #expect(streamed.properties["Kind"] == "streamed")
                var pieces = 0
                var body = ByteBuffer()
                for try await var piece in streamed.body {
                    pieces += 1
                    body.writeBuffer(&piece)
                }
                #expect(body == MeteredBody.expected(total: size, chunk: 10_000))
                if size == 300_000 { #expect(pieces > 1) }
            }
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "upload-download"),
                body: ChunkedBody(total: 100_000, chunk: 9_000)
            )
            #expect(reply.body == MeteredBody.expected(total: 100_000, chunk: 7_000))
            // Every reply went out whole: the server tracks nothing more (checked for up to 5 s).
            let server = peers.serverConnection
            for _ in 0..<500 where server.core.pendingBookkeeping > 0 { try await Task.sleep(for: .milliseconds(10)) }
            #expect(server.core.pendingBookkeeping == 0, "\(server.stateDescription)")
        }
        #expect(meter.iteratorsAlive == 0)
    }

    @Test("a compressed streamed reply is compressed on the wire (BLIP 3) and arrives intact")
    func compressed() async throws {
        let meter = BodyMeter()
        let peers = InMemoryPeers(router: Self.router(meter: meter))
        let server = peers.serverConnection
        let size = 1 << 20
        try await peers.run { connection in
            let reply = try await connection.sendRequest(Self.download(size, chunk: 100_000, compress: true))
            #expect(reply.body == MeteredBody.expected(total: size, chunk: 100_000))
        }
        let statistics = server.statistics
        #expect(statistics.bytesBeforeCompression >= size)
        #expect(statistics.bytesAfterCompression < size / 10)
    }

    /// The reader stops after one piece: the source must stop within a window of it (the window is fixed
    /// at 128 000 bytes here; the engine asks for more while under 64 KiB queued, one piece read ahead).
    @Test("an 8 MiB streamed reply is pulled no further ahead of a slow reader than the window")
    func pulledNoFasterThanRead() async throws {
        let meter = BodyMeter()
        var configuration = BLIPConnection.Configuration()
        configuration.sendWindow = .fixed(128_000)
        let peers = InMemoryPeers(router: Self.router(meter: meter), serverConfiguration: configuration)
        let total = 8 << 20
        let chunk = 32_768
        let bound = 1 << 20
        try await peers.run { connection in
            let reply = try await connection.sendRequestStreamingReply(Self.download(total, chunk: chunk))
            var iterator = reply.body.makeAsyncIterator()
            var consumed = 0
            var aheadMost = 0
            var first = try #require(try await iterator.next())
            #expect(MeteredBody.matches(first, at: 0, chunk: chunk))
            consumed += first.readableBytes
            first.clear()
            // The reader holds still: the source stops (checked every 20 ms, for at most 4 s).
            var last = -1
            for _ in 0..<200 where meter.produced != last {
                last = meter.produced
                try await Task.sleep(for: .milliseconds(20))
            }
            #expect(meter.produced - consumed <= bound, "pulled \(meter.produced) while \(consumed) was read")
            // Then it reads slowly, never finding the source far ahead.
            var pieces = 0
            while let piece = try await iterator.next() {
                #expect(MeteredBody.matches(piece, at: consumed, chunk: chunk))
                consumed += piece.readableBytes
                aheadMost = max(aheadMost, meter.produced - consumed)
                pieces += 1
                if pieces % 32 == 0 { try await Task.sleep(for: .milliseconds(1)) }
            }
            #expect(consumed == total)
            #expect(aheadMost <= bound, "the source ran \(aheadMost) bytes ahead of the reader")
        }
    }

    @Test(
        "a source that fails before its first piece: the request gets ERR BLIP/500, logged",
        arguments: [false, true]
    )
    func failsBeforeFirstFrame(streamingReader: Bool) async throws {
        let logs = CapturingLogHandler.Store()
        let meter = BodyMeter()
        var router = BLIPRouter()
        router.register(profile: "broken") { _, _ in
            BLIPResponse(bodyStream: MeteredBody(total: 100, chunk: 10, failsAfter: 0, meter: meter))
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let (client, server) = BLIPInMemoryTransport.makePair()
        let serverConnection = BLIPConnection(transport: server, router: router, logger: logs.logger(level: .info))
        // Taking the connection's lock in the log handler hangs (past the time limit) if a log call is made
        // under it.
        logs.setHook { _ = serverConnection.isClosed }
        let serverRun = Task { await serverConnection.run() }
        try await withBLIPConnection(over: client) { connection in
            let error = await #expect(throws: BLIPError.self) {
                if streamingReader {
                    _ = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "broken"))
                } else {
                    _ = try await connection.sendRequest(BLIPRequest(profile: "broken"))
                }
            }
            #expect(error?.domain == .blip && error?.code == 500)
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still here"))
            #expect(String(buffer: reply.body) == "still here")
        }
        await serverConnection.close()
        _ = await serverRun.value
        #expect(meter.failures == 1)
        #expect(logs.messages(atLeast: .error).contains { $0.contains("reply") })
    }

    /// Frames leave only when the test drains them: the second piece fails before any frame of the reply
    /// left, so the reply can still be replaced by ERR BLIP/500.
    @Test("a source that fails before any frame of the reply left: ERR BLIP/500, the connection goes on")
    func failsBeforeAnyFrameLeft() async throws {
        let meter = BodyMeter()
        var router = BLIPRouter()
        router.register(profile: "broken") { _, _ in
            BLIPResponse(bodyStream: MeteredBody(total: 100_000, chunk: 10_000, failsAfter: 1, meter: meter))
        }
        let logs = CapturingLogHandler.Store()
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport, router: router, logger: logs.logger(level: .info))
        let run = Task { await connection.run() }
        let peer = ScriptedPeer(transport: transport)
        _ = try peer.engine.enqueue(BLIPOutgoingMessage(.request, properties: ["Profile": "broken"]))
        try peer.flush()
        // The failure is logged once it has been handled (within 5 s); nothing was drained until then.
        let handled = { logs.messages(atLeast: .error).contains { $0.contains("failed") } }
        for _ in 0..<500 where !handled() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(meter.failures == 1)
        // The writer runs once more after the failure was handled (within 5 s).
        for _ in 0..<500 where peer.replies.isEmpty {
            try peer.receive()
            try await Task.sleep(for: .milliseconds(10))
        }
        let reply = try #require(peer.replies.first)
        #expect(reply.number == 1 && reply.type == .error)
        #expect(reply.properties["Error-Domain"] == "BLIP" && reply.properties["Error-Code"] == "500")
        #expect(!connection.isClosed)
        await connection.close()
        _ = await run.value
    }

    /// BLIP cannot abort a message: as for a streamed request body, the connection closes with 1011 (our
    /// failure), and the requester fails once with the close.
    @Test("a source that fails after its first frame closes the connection with 1011", arguments: [false, true])
    func failsAfterFirstFrame(streamingReader: Bool) async throws {
        let meter = BodyMeter()
        var router = BLIPRouter()
        router.register(profile: "broken") { _, _ in
            BLIPResponse(bodyStream: MeteredBody(total: 1 << 20, chunk: 100_000, failsAfter: 2, meter: meter))
        }
        let (clientConnection, _, clientRun, serverRun) = Self.runningPair(serverRouter: router)
        let failures = NIOLockedValueBox(0)
        do {
            if streamingReader {
                let reply = try await clientConnection.sendRequestStreamingReply(BLIPRequest(profile: "broken"))
                for try await _ in reply.body {}
            } else {
                _ = try await clientConnection.sendRequest(BLIPRequest(profile: "broken"))
            }
        } catch let error as BLIPConnectionError {
            failures.withLockedValue { $0 += 1 }
            #expect(error.closeStatus?.code == .internalError)
        }
        #expect(failures.withLockedValue { $0 } == 1)
        let serverStatus = await serverRun.value
        #expect(serverStatus.code == .internalError && serverStatus.initiator == .local)
        let clientStatus = await clientRun.value
        #expect(clientStatus.code == .internalError && clientStatus.initiator == .peer)
        #expect(meter.failures == 1)
        #expect(meter.iteratorsAlive == 0)
    }

    /// Either the source waits in `next()` (the close cancels it) or the reader stopped and the window is
    /// full (the close fails the wait for room): either way pulling stops, the connection's run returns
    /// and the source is let go.
    @Test(
        "the connection closing while a reply streams stops the pulling",
        arguments: [(stalls: true, clientCloses: true), (false, true), (true, false), (false, false)]
    )
    func closedMidStream(stalls: Bool, clientCloses: Bool) async throws {
        let meter = BodyMeter()
        var router = BLIPRouter()
        router.register(profile: "endless") { _, _ in
            BLIPResponse(
                bodyStream: MeteredBody(total: 1 << 30, chunk: 50_000, stallsAfter: stalls ? 3 : nil, meter: meter)
            )
        }
        let (clientConnection, serverConnection, clientRun, serverRun) = Self.runningPair(serverRouter: router)
        let reply = try await clientConnection.sendRequestStreamingReply(BLIPRequest(profile: "endless"))
        var iterator = reply.body.makeAsyncIterator()
        _ = try await iterator.next()
        if clientCloses {
            await clientConnection.close()
        } else {
            await serverConnection.close()
        }
        _ = await serverRun.value  // would hang (past the time limit) if the pulling did not end
        _ = await clientRun.value
        let produced = meter.produced
        try await Task.sleep(for: .milliseconds(50))
        #expect(meter.produced == produced)
        #expect(produced < 16 << 20)
        #expect(meter.iteratorsAlive == 0)
    }

    /// Regression: a second reader's waiter replaced the first one's, so the first waited forever (even past
    /// the connection's close) and nothing showed the misuse.
    @Test("a second task reading a body stream while another waits gets alreadyReading; the first is unharmed")
    func secondReaderTurnedAway() async throws {
        let meter = BodyMeter()
        var router = BLIPRouter()
        router.register(profile: "stalling") { _, _ in
            BLIPResponse(bodyStream: MeteredBody(total: 1 << 20, chunk: 10_000, stallsAfter: 2, meter: meter))
        }
        let (clientConnection, _, clientRun, serverRun) = Self.runningPair(serverRouter: router)
        let reply = try await clientConnection.sendRequestStreamingReply(BLIPRequest(profile: "stalling"))

        let firstOutcome = NIOLockedValueBox<Result<Int, any Error>?>(nil)
        let firstReader = Task {
            do {
                var total = 0
                for try await piece in reply.body { total += piece.readableBytes }
                firstOutcome.withLockedValue { $0 = .success(total) }
            } catch {
                firstOutcome.withLockedValue { $0 = .failure(error) }
            }
        }
        // The first reader has read the two pieces and waits for a third (5 s at most).
        let isWaiting = {
            clientConnection.core.state.withLockedValue { $0.streams.values.contains { $0.waiter != nil } }
        }
        for _ in 0..<500 where !isWaiting() { try await Task.sleep(for: .milliseconds(10)) }
        #expect(isWaiting())

        let secondOutcome = NIOLockedValueBox<Result<ByteBuffer?, any Error>?>(nil)
        let secondReader = Task {
            var iterator = reply.body.makeAsyncIterator()
            do {
                let piece = try await iterator.next()
                secondOutcome.withLockedValue { $0 = .success(piece) }
            } catch {
                secondOutcome.withLockedValue { $0 = .failure(error) }
            }
        }
        for _ in 0..<500 where secondOutcome.withLockedValue({ $0 }) == nil {
            try await Task.sleep(for: .milliseconds(10))
        }
        switch secondOutcome.withLockedValue({ $0 }) {
        case .failure(let error as BLIPConnectionError): #expect(error.code == .alreadyReading)
        case nil: Issue.record("the second reader got no answer within 5 s")
        case let other?: Issue.record("the second reader got \(other), not alreadyReading")
        }
        #expect(firstOutcome.withLockedValue { $0 } == nil, "the first reader still waits")

        // The close reaches the first reader: its wait was not lost (10 s at most).
        await clientConnection.close()
        for _ in 0..<1_000 where firstOutcome.withLockedValue({ $0 }) == nil {
            try await Task.sleep(for: .milliseconds(10))
        }
        switch firstOutcome.withLockedValue({ $0 }) {
        case .failure(let error as BLIPConnectionError): #expect(error.code == .connectionClosed)
        case nil: Issue.record("the first reader got no answer within 10 s of the close")
        case let other?: Issue.record("the first reader got \(other) at the close")
        }
        if firstOutcome.withLockedValue({ $0 }) != nil {
            await firstReader.value
            await secondReader.value
            _ = await serverRun.value
            _ = await clientRun.value
        }
    }

    @Test("a no-reply request's streamed reply is never pulled")
    func noReplyNeverPulled() async throws {
        let meter = BodyMeter()
        let handled = NIOLockedValueBox(false)
        var router = Self.router(meter: meter)
        router.register(profile: "note") { _, _ in
            handled.withLockedValue { $0 = true }
            return BLIPResponse(bodyStream: MeteredBody(total: 100_000, chunk: 1_000, meter: meter))
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            try await connection.sendNoReply(BLIPRequest(profile: "note"))
            // Handlers run concurrently: wait for this one (5 s at most), then a round trip.
            for _ in 0..<500 where !handled.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(handled.withLockedValue { $0 })
        #expect(meter.iteratorsMade == 0)
    }

    @Test("a delivered request answered with a streamed reply")
    func deliveredRequest() async throws {
        let meter = BodyMeter()
        var configuration = BLIPConnection.Configuration()
        configuration.unhandledRequests = .deliver
        let peers = InMemoryPeers(router: BLIPRouter(), serverConfiguration: configuration)
        let server = peers.serverConnection
        let answering = Task {
            for await incoming in server.incomingRequests {
                try incoming.respond(BLIPResponse(bodyStream: MeteredBody(total: 200_000, chunk: 30_000, meter: meter)))
                return
            }
        }
        try await peers.run { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "anything"))
            #expect(reply.body == MeteredBody.expected(total: 200_000, chunk: 30_000))
        }
        try await answering.value
    }
}
