import BLIP
import Testing

/// The samples of the BLIP catalog's articles, each run against an in-memory peer.
@Suite("Samples of the BLIP articles", .timeLimit(.minutes(1)))
struct BLIPArticleSamples {
    @Test("BLIP.md: the overview's echo over an in-memory pair")
    func overview() async throws {
        // sample: BLIP.docc/BLIP.md #1
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body)
        }

        let (client, server) = BLIPInMemoryTransport.makePair()
        let serverConnection = BLIPConnection(transport: server, router: router)
        Task { await serverConnection.run() }

        try await withBLIPConnection(over: client) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
            print(reply.text)
        }
        // end sample
    }

    @Test("ClosingAndRetries.md: closing with codes, gracefully, from a handler")
    func closing() async throws {
        try await withPeer(router: echoRouter()) { connection in
            // sample: BLIP.docc/ClosingAndRetries.md #1
            await connection.close()  // 1000: done
            await connection.close(code: .goingAway, reason: "shutting down")  // 1001
            await connection.close(code: 4001, reason: "session expired")  // the application's own
            // end sample
            #expect(await connection.closed().code == .normalClosure)
        }
        try await withPeer(router: echoRouter()) { connection in
            // sample: BLIP.docc/ClosingAndRetries.md #2
            await connection.closeGracefully(drainTimeout: .seconds(10))  // then 1001 "going away"
            // end sample
            #expect(await connection.closed().code == .goingAway)
        }
        var router = BLIPRouter()
        // sample: BLIP.docc/ClosingAndRetries.md #3
        router.register(profile: "logout") { _, context in
            let connection = context.connection
            Task { await connection.close(code: .policyViolation, reason: "logged out") }
            return BLIPResponse()
        }
        // end sample
        // The connection ends while its scope is open: the scope throws the close.
        let ended = await #expect(throws: BLIPConnectionError.self) {
            try await withPeer(router: router) { connection in
                _ = try? await connection.sendRequest(BLIPRequest(profile: "logout"))
                _ = await connection.closed()
            }
        }
        #expect(ended?.closeStatus?.code == .policyViolation && ended?.closeStatus?.reason == "logged out")
    }

    @Test("ClosingAndRetries.md: shouldRetry, and a reconnect loop that ends on a permanent close")
    func retries() async throws {
        #expect(shouldRetry(BLIPConnectionError(.transportFailed, "reset")))
        #expect(!shouldRetry(BLIPError(code: .notFound)))
        // The peer closes each connection at once: first as restarting (1012, transient), then as a
        // policy violation (1008), which ends the loop by throwing.
        let attempts = Counter()
        func openTransport() async throws -> any BLIPTransport {
            let (client, server) = BLIPInMemoryTransport.makePair()
            let code: BLIPCloseCode = await attempts.next() == 1 ? .serviceRestart : .policyViolation
            let peer = BLIPConnection(transport: server)
            Task {
                Task { await peer.run() }
                await peer.close(code: code, reason: "")
            }
            return client
        }
        let router = BLIPRouter()
        let ended = await #expect(throws: BLIPConnectionError.self) {
            // sample: BLIP.docc/ClosingAndRetries.md #5
            while true {
                do {
                    try await withBLIPConnection(over: try await openTransport(), router: router) { _ in
                        try await Task.sleep(for: .seconds(3600 * 24))  // serve the peer's requests
                    }
                } catch let error as BLIPConnectionError where error.closeStatus?.isTransient ?? true {
                    try await Task.sleep(for: .seconds(5))  // then reconnect
                }
            }
            // end sample
        }
        #expect(ended?.closeStatus?.code == .policyViolation)
        #expect(await attempts.count == 2)
    }

    @Test("Errors.md: an ERR 404 is an answer, caught by its domain and code")
    func errors() async throws {
        var router = BLIPRouter()
        // Sync Gateway answers a missing checkpoint with HTTP/404.
        router.register(profile: "getCheckpoint") { _, _ in
            throw BLIPError(domain: .http, code: 404, message: "missing")
        }
        let outcome = Outcome()
        func use(_ reply: BLIPResponse) { outcome.set("reply") }
        try await withPeer(router: router) { connection in
            // sample: BLIP.docc/Errors.md #1
            do {
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "getCheckpoint"),
                    timeout: .seconds(10)
                )
                use(reply)
            } catch let error as BLIPError where error.domain == .http && error.code == 404 {
                // the peer has no checkpoint: an answer, not a failure
            } catch let error as BLIPConnectionError where error.code == .timedOut {
                // no reply within 10 s; the request was cancelled
            } catch let error as BLIPConnectionError {
                print("connection ended:", error.closeStatus.map { "\($0)" } ?? error.message)
            }
            // end sample
        }
        #expect(outcome.value == nil, "the 404 was caught, not used as a reply")
    }

    @Test("GettingStarted.md: a router, requests of each kind, an in-memory pair")
    func gettingStarted() async throws {
        // sample: BLIP.docc/GettingStarted.md #2
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body)
        }
        router.register(profile: "greet") { request, _ in
            guard let name = request.properties["Name"] else {
                throw BLIPError(code: .badRequest, message: "Name is missing")
            }
            return BLIPResponse(text: "Hello, \(name)!")
        }
        // end sample
        let (transport, peerSide) = BLIPInMemoryTransport.makePair()
        let peer = BLIPConnection(transport: peerSide, router: router)
        Task { await peer.run() }
        // sample: BLIP.docc/GettingStarted.md #3
        try await withBLIPConnection(over: transport, router: router) { connection in
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "greet", properties: ["Name": "Ada"])
            )
            print(reply.text)

            // A request the peer must not answer.
            try await connection.sendNoReply(BLIPRequest(profile: "log", text: "started"))

            // Ahead of normal traffic, and compressed on the wire.
            _ = try await connection.sendRequest(
                BLIPRequest(profile: "echo", text: "now", urgent: true, compressed: true)
            )
        }
        // end sample
        // sample: BLIP.docc/GettingStarted.md #5
        let (client, server) = BLIPInMemoryTransport.makePair()
        let serverConnection = BLIPConnection(transport: server, router: router)
        Task { await serverConnection.run() }
        try await withBLIPConnection(over: client) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
            assert(reply.text == "hi")
        }
        // end sample
    }

    @Test("HandlerOrder.md: routers of each order; ordered outcomes of many requests")
    func handlerOrder() async throws {
        // sample: BLIP.docc/HandlerOrder.md #1
        var router = BLIPRouter()  // .concurrent, the default
        var replicator = BLIPRouter(handlerOrder: .serial)  // one at a time
        // end sample
        router.register(profile: "rev") { request, _ in
            guard request.text != "bad" else { throw BLIPError(code: .forbidden) }
            return BLIPResponse(body: request.body)
        }
        replicator = router
        let revisions = ["a", "b", "bad", "c"].map { BLIPRequest(profile: "rev", text: $0) }
        let pushed = Outcome()
        func markPushed(_ reply: BLIPResponse) { pushed.append(reply.text) }
        func recordFailure(_ error: any Error) { pushed.append("failed") }
        try await withPeer(router: replicator) { connection in
            // sample: BLIP.docc/HandlerOrder.md #2
            for await outcome in connection.sendRequests(revisions, maximumInFlight: 64) {
                switch outcome {
                case .success(let reply): markPushed(reply)
                case .failure(let error): recordFailure(error)  // one revision's ERR does not end the sequence
                }
            }
            // end sample
        }
        #expect(pushed.all == ["a", "b", "failed", "c"])
    }

    @Test("Streaming.md: a generated body streamed out as a request, then as a reply")
    func generatedBodies() async throws {
        var uploads = BLIPRouter()
        uploads.registerStreaming(profile: "upload") { request, _ in
            var total = 0
            var compressed = request.properties["Name"] == "backup"
            for try await piece in request.body { total += piece.readableBytes }
            compressed = compressed && request.isCompressed
            return BLIPResponse(properties: ["Count": "\(total)", "Compressed": "\(compressed)"])
        }
        let downloaded = try await withPeer(router: uploads) { connection in
            // sample: BLIP.docc/Streaming.md #1
            /// `count` pieces of 1 MiB, each made when the connection asks for it.
            struct GeneratedBody: AsyncSequence, Sendable {
                let count: Int

                struct AsyncIterator: AsyncIteratorProtocol {
                    let count: Int
                    var made = 0

                    mutating func next() async -> ByteBuffer? {
                        guard self.made < self.count else { return nil }
                        defer { self.made += 1 }
                        return ByteBuffer(repeating: UInt8(self.made % 256), count: 1 << 20)  // or read it from a file
                    }
                }

                func makeAsyncIterator() -> AsyncIterator { AsyncIterator(count: self.count) }
            }

            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "upload", properties: ["Name": "backup"], compressed: true),
                body: GeneratedBody(count: 16)  // 16 MiB; a count of 1 024 is 1 GiB, in no more memory
            )
            // end sample
            #expect(reply.properties["Count"] == "\(16 << 20)")
            #expect(reply.properties["Compressed"] == "true")

            var router = BLIPRouter()
            // sample: BLIP.docc/Streaming.md #3
            router.register(profile: "getAttachment") { request, _ in
                // 16 MiB, made a piece at a time as the peer reads it (GeneratedBody above).
                BLIPResponse(
                    properties: ["Content-Type": "application/octet-stream"],
                    bodyStream: GeneratedBody(count: 16)
                )
            }
            // end sample
            return try await withPeer(router: router) { connection in
                let attachment = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "getAttachment"))
                var total = 0
                var lastByte: UInt8?
                for try await piece in attachment.body {
                    total += piece.readableBytes
                    lastByte = piece.getInteger(at: piece.readerIndex + piece.readableBytes - 1) ?? lastByte
                }
                #expect(attachment.properties["Content-Type"] == "application/octet-stream")
                return (total, lastByte)
            }
        }
        #expect(downloaded.0 == 16 << 20)
        #expect(downloaded.1 == 15)
    }

    @Test("Streaming.md: a streaming handler, a streamed reply read as it comes, progress reports")
    func streaming() async throws {
        var router = BLIPRouter()
        // sample: BLIP.docc/Streaming.md #2
        router.registerStreaming(profile: "upload") { request, _ in
            var total = 0
            for try await piece in request.body {
                total += piece.readableBytes  // write it somewhere instead of keeping it
            }
            return BLIPResponse(properties: ["Count": "\(total)"])
        }
        // end sample
        router.register(profile: "download") { _, _ in BLIPResponse(body: ByteBuffer(repeating: 7, count: 300_000)) }
        router.register(profile: "rev") { request, _ in BLIPResponse(body: request.body) }
        let received = Outcome()
        func consume(_ piece: ByteBuffer) { received.add(piece.readableBytes) }
        let meter = Meter()
        let revision = ByteBuffer(repeating: 1, count: 100_000)
        try await withPeer(router: router) { connection in
            let uploaded = try await connection.sendRequest(
                BLIPRequest(profile: "upload"),
                body: Pieces(pieces: [ByteBuffer(repeating: 1, count: 70_000), ByteBuffer(repeating: 2, count: 30_000)])
            )
            #expect(uploaded.properties["Count"] == "100000")
            // sample: BLIP.docc/Streaming.md #4
            let reply = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "download"))
            print(reply.properties)
            for try await piece in reply.body {
                consume(piece)
            }
            // end sample
        }
        try await withPeer(router: router) { connection in
            // sample: BLIP.docc/Streaming.md #5
            let reply = try await connection.sendRequest(BLIPRequest(profile: "rev", body: revision)) { progress in
                meter.update(sent: progress.bytesSent, received: progress.replyBytesReceived)
            }
            // end sample
            #expect(reply.body.readableBytes == 100_000)
        }
        #expect(received.total == 300_000)
        // The last report: the whole request sent (its body and property block), the whole reply received.
        #expect(meter.last.0 >= 100_000 && meter.last.1 == 100_000, "\(meter.last)")
    }

    @Test("Tracing.md: tracing turned on in a configuration")
    func tracing() async throws {
        // sample: BLIP.docc/Tracing.md #1
        var configuration = BLIPConnection.Configuration()
        // The tracer is the one bootstrapped in InstrumentationSystem.
        configuration.tracing = .enabled(propagatesTraceContext: true)
        // end sample
        let (client, server) = BLIPInMemoryTransport.makePair()
        let peer = BLIPConnection(transport: server, router: echoRouter())
        Task { await peer.run() }
        try await withBLIPConnection(over: client, configuration: configuration) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "t"))
            #expect(reply.text == "t")
        }
    }
}

// sample: BLIP.docc/ClosingAndRetries.md #4
func shouldRetry(_ error: any Error) -> Bool {
    if let error = error as? BLIPConnectionError {
        return error.closeStatus?.isTransient ?? (error.code == .transportFailed)
    }
    return false  // an ERR reply or a programming error: retrying sends the same thing again
}
// end sample
