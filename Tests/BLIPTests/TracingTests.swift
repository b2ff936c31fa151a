import InMemoryTracing
import NIOCore
import Synchronization
import Testing
import Tracing

@testable import BLIP

/// Spans for requests sent and handled, and the trace context between peers, with an in-memory tracer.
@Suite("Distributed tracing", .timeLimit(.minutes(2)))
struct TracingTests {
    /// A handler that waits until the test lets it answer (bounded: 20 s), and tells when it has started.
    final class Gate: Sendable {
        private let started = Atomic<Bool>(false)
        private let released = Atomic<Bool>(false)

        func enter() async throws {
            self.started.store(true, ordering: .releasing)
            for _ in 0..<4_000 where !self.released.load(ordering: .acquiring) {
                try await Task.sleep(for: .milliseconds(5))
            }
        }

        func waitUntilEntered() async throws {
            for _ in 0..<4_000 where !self.started.load(ordering: .acquiring) {
                try await Task.sleep(for: .milliseconds(5))
            }
        }

        func release() { self.released.store(true, ordering: .releasing) }
    }

    static func router(gate: Gate = Gate(), cancelGate: Gate = Gate()) -> BLIPRouter {
        var router = standardRouter()
        router.register(profile: "wait") { _, _ in
            try await gate.enter()
            return BLIPResponse(text: "late")
        }
        router.register(profile: "waitToCancel") { _, _ in
            try await cancelGate.enter()
            return BLIPResponse(text: "late")
        }
        router.register(profile: "fail") { _, _ in
            struct Failure: Error {}
            throw Failure()
        }
        router.registerSynchronous(profile: "syncContext") { _, _ in
            BLIPResponse(text: ServiceContext.current?.inMemorySpanContext?.spanID ?? "none")
        }
        router.register(profile: "asyncContext") { _, _ in
            BLIPResponse(text: ServiceContext.current?.inMemorySpanContext?.spanID ?? "none")
        }
        router.register(profile: "properties") { request, _ in
            BLIPResponse(text: request.properties.map { $0.name }.sorted().joined(separator: ","))
        }
        router.registerStreaming(profile: "count") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(text: "\(total)")
        }
        // Asks the peer for its echo from inside this handler's span.
        router.register(profile: "callBack") { _, context in
            try await context.connection.sendRequest(BLIPRequest(profile: "echo", text: "back"))
        }
        return router
    }

    static func tracing(_ tracer: some Tracer, propagates: Bool = true) -> BLIPConnection.Configuration {
        var configuration = BLIPConnection.Configuration()
        configuration.tracing = .enabled(tracer: tracer, propagatesTraceContext: propagates)
        return configuration
    }

    static func span(
        _ tracer: InMemoryTracer,
        _ name: String,
        _ kind: SpanKind
    ) -> FinishedInMemorySpan? {
        tracer.finishedSpans.first { $0.operationName == name && $0.kind == kind }
    }

    @Test("a request and its handler get a client and a server span, with profile, sizes, flags and outcome")
    func clientAndServerSpans() async throws {
        let tracer = InMemoryTracer()
        let peers = InMemoryPeers(router: Self.router(), serverConfiguration: Self.tracing(tracer))
        try await peers.run(clientConfiguration: Self.tracing(tracer)) { connection in
            let request = BLIPRequest(profile: "echo", body: pattern(100), urgent: true, compressed: true)
            let reply = try await connection.sendRequest(request)
            #expect(reply.body.readableBytes == 100)
        }
        let client = try #require(Self.span(tracer, "echo", .client))
        let server = try #require(Self.span(tracer, "echo", .server))
        for span in [client, server] {
            #expect(span.attributes["rpc.system"]?.toSpanAttribute() == .string("blip"))
            #expect(span.attributes["rpc.method"]?.toSpanAttribute() == .string("echo"))
            #expect(span.attributes["blip.request.size"]?.toSpanAttribute() == .int64(100))
            #expect(span.attributes["blip.reply.size"]?.toSpanAttribute() == .int64(100))
            #expect(span.attributes["blip.request.urgent"]?.toSpanAttribute() == .bool(true))
            #expect(span.attributes["blip.request.compressed"]?.toSpanAttribute() == .bool(true))
            #expect(span.attributes["blip.request.noreply"]?.toSpanAttribute() == .bool(false))
            #expect(span.attributes["blip.outcome"]?.toSpanAttribute() == .string("reply"))
            #expect(span.status == nil)
            #expect(span.errors.isEmpty)
        }
        #expect(server.attributes["blip.request.number"]?.toSpanAttribute() == .int64(1))
        // Both ends propagate: the server's span is the client's child, in its trace.
        #expect(server.traceID == client.traceID)
        #expect(server.parentSpanID == client.spanID)
        #expect(tracer.activeSpans.isEmpty)
    }

    @Test("a span per outcome: ERR reply, handler failure, no-reply, timeout, cancellation")
    func outcomes() async throws {
        let tracer = InMemoryTracer()
        let gate = Gate()
        let cancelGate = Gate()
        let peers = InMemoryPeers(
            router: Self.router(gate: gate, cancelGate: cancelGate),
            serverConfiguration: Self.tracing(tracer)
        )
        try await peers.run(clientConfiguration: Self.tracing(tracer)) { connection in
            await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "error", properties: ["Want-Error-Code": "409"]))
            }
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "fail")) }
            try await connection.sendNoReply(BLIPRequest(profile: "sink", text: "12345"))
            await #expect(throws: BLIPConnectionError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "wait", text: "t"), timeout: .milliseconds(50))
            }
            let cancelled = Task { try await connection.sendRequest(BLIPRequest(profile: "waitToCancel")) }
            try await cancelGate.waitUntilEntered()
            cancelled.cancel()
            await #expect(throws: CancellationError.self) { try await cancelled.value }
            gate.release()
            cancelGate.release()
            // The cancelled request's handler still answers (BLIP cannot cancel the peer's work); wait for
            // it before the session's end would cancel it.
            for _ in 0..<2_000 where Self.span(tracer, "waitToCancel", .server) == nil {
                try await Task.sleep(for: .milliseconds(5))
            }
            // The server's sink span ends before its handler's slot frees; a round trip orders it.
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
        }

        let errorSpans = tracer.finishedSpans.filter { $0.operationName == "error" }
        #expect(errorSpans.count == 2)
        for span in errorSpans {
            #expect(span.attributes["blip.outcome"]?.toSpanAttribute() == .string("error"))
            #expect(span.attributes["blip.error.domain"]?.toSpanAttribute() == .string("HTTP"))
            #expect(span.attributes["blip.error.code"]?.toSpanAttribute() == .int64(409))
            #expect(span.status?.code == .error)
            #expect(span.errors.count == 1)
        }
        let failSpans = tracer.finishedSpans.filter { $0.operationName == "fail" }
        #expect(failSpans.count == 2)
        for span in failSpans {
            #expect(span.attributes["blip.error.domain"]?.toSpanAttribute() == .string("BLIP"))
            #expect(span.attributes["blip.error.code"]?.toSpanAttribute() == .int64(501))
            #expect(span.status?.code == .error)
        }
        let sentNoReply = try #require(Self.span(tracer, "sink", .client))
        #expect(sentNoReply.attributes["blip.outcome"]?.toSpanAttribute() == .string("sent"))
        #expect(sentNoReply.attributes["blip.request.noreply"]?.toSpanAttribute() == .bool(true))
        #expect(sentNoReply.attributes["blip.reply.size"] == nil)
        let handledNoReply = try #require(Self.span(tracer, "sink", .server))
        #expect(handledNoReply.attributes["blip.outcome"]?.toSpanAttribute() == .string("handled"))
        #expect(handledNoReply.attributes["blip.request.size"]?.toSpanAttribute() == .int64(5))

        // A timeout is a failure of the request; a cancellation is the caller's choice.
        let timedOut = try #require(Self.span(tracer, "wait", .client))
        #expect(timedOut.attributes["blip.outcome"]?.toSpanAttribute() == .string("timedOut"))
        #expect(timedOut.status?.code == .error)
        let cancelled = try #require(Self.span(tracer, "waitToCancel", .client))
        #expect(cancelled.attributes["blip.outcome"]?.toSpanAttribute() == .string("cancelled"))
        #expect(cancelled.status == nil)
        // Every span ended: the session's end cancelled a timed-out request's handler still waiting.
        #expect(tracer.activeSpans.isEmpty)
        let handled = try #require(Self.span(tracer, "waitToCancel", .server))
        #expect(handled.attributes["blip.outcome"]?.toSpanAttribute() == .string("reply"))
    }

    @Test("a request cut off by the connection's close ends its span with the close")
    func connectionClosed() async throws {
        let tracer = InMemoryTracer()
        let gate = Gate()
        let peers = InMemoryPeers(router: Self.router(gate: gate), serverConfiguration: Self.tracing(tracer))
        // The session ends with the server's close, so it throws that close.
        do {
            try await peers.run(clientConfiguration: Self.tracing(tracer)) { connection in
                let reply = Task { try await connection.sendRequest(BLIPRequest(profile: "wait")) }
                try await gate.waitUntilEntered()
                _ = await peers.serverConnection.close(code: .goingAway)
                let error = await #expect(throws: BLIPConnectionError.self) { try await reply.value }
                #expect(error?.code == .connectionClosed)
            }
            Issue.record("the session did not end with the server's close")
        } catch {
            #expect((error as? BLIPConnectionError)?.code == .connectionClosed)
        }
        // Released only now: the server's run() returned, so its close must have cancelled the handler.
        gate.release()
        let span = try #require(Self.span(tracer, "wait", .client))
        #expect(span.attributes["blip.outcome"]?.toSpanAttribute() == .string("connectionClosed"))
        #expect(span.status?.code == .error)
        // The server's handler was cancelled by its connection's close: that is its outcome, not BLIP/501.
        let handler = try #require(Self.span(tracer, "wait", .server))
        #expect(handler.attributes["blip.outcome"]?.toSpanAttribute() == .string("cancelled"))
        #expect(handler.attributes["blip.error.code"] == nil)
        #expect(tracer.activeSpans.isEmpty)
    }

    @Test("handlers run in their span: synchronous, async, and the requests they send are its children")
    func handlerContext() async throws {
        let tracer = InMemoryTracer()
        let peers = InMemoryPeers(router: Self.router(), serverConfiguration: Self.tracing(tracer))
        try await peers.run(clientConfiguration: Self.tracing(tracer), clientRouter: standardRouter()) { connection in
            for profile in ["syncContext", "asyncContext"] {
                let reply = try await connection.sendRequest(BLIPRequest(profile: profile))
                let server = try #require(Self.span(tracer, profile, .server))
                #expect(String(buffer: reply.body) == server.spanID)
            }
            let back = try await connection.sendRequest(BLIPRequest(profile: "callBack"))
            #expect(String(buffer: back.body) == "back")
        }
        let handler = try #require(Self.span(tracer, "callBack", .server))
        let nestedClient = try #require(Self.span(tracer, "echo", .client))
        let nestedServer = try #require(Self.span(tracer, "echo", .server))
        #expect(nestedClient.parentSpanID == handler.spanID)
        #expect(nestedServer.parentSpanID == nestedClient.spanID)
        #expect(Set([handler.traceID, nestedClient.traceID, nestedServer.traceID]).count == 1)
    }

    @Test("a request's span is a child of the caller's span")
    func callerContext() async throws {
        let tracer = InMemoryTracer()
        let peers = InMemoryPeers(router: Self.router())
        let parent = tracer.startSpan("replicate", context: .topLevel)
        try await ServiceContext.$current.withValue(parent.context) {
            try await peers.run(clientConfiguration: Self.tracing(tracer)) { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
        }
        parent.end()
        let client = try #require(Self.span(tracer, "echo", .client))
        #expect(client.parentSpanID == parent.spanID)
        #expect(client.traceID == parent.traceID)
    }

    @Test("the trace context crosses only when both ends opt in")
    func propagationNeedsBothEnds() async throws {
        for (clientPropagates, serverPropagates) in [(true, false), (false, true), (false, false)] {
            let tracer = InMemoryTracer()
            let peers = InMemoryPeers(
                router: Self.router(),
                serverConfiguration: Self.tracing(tracer, propagates: serverPropagates)
            )
            let names = try await peers.run(clientConfiguration: Self.tracing(tracer, propagates: clientPropagates)) {
                String(buffer: try await $0.sendRequest(BLIPRequest(profile: "properties")).body)
            }
            // Only a client that propagates adds properties to the request.
            let injected = [InMemoryTracer.spanIDKey, InMemoryTracer.traceIDKey].sorted()
            #expect(names == (["Profile"] + (clientPropagates ? injected : [])).sorted().joined(separator: ","))
            let client = try #require(Self.span(tracer, "properties", .client))
            let server = try #require(Self.span(tracer, "properties", .server))
            #expect(server.parentSpanID == nil, "client \(clientPropagates), server \(serverPropagates)")
            #expect(server.traceID != client.traceID)
        }
    }

    @Test("W3C trace context: a tracer that propagates it puts traceparent in the request, and the server joins")
    func w3cTraceContext() async throws {
        let tracer = W3CTestTracer()
        let peers = InMemoryPeers(router: Self.router(), serverConfiguration: Self.tracing(tracer))
        let names = try await peers.run(clientConfiguration: Self.tracing(tracer)) {
            String(buffer: try await $0.sendRequest(BLIPRequest(profile: "properties")).body)
        }
        #expect(names == "Profile,traceparent")
        let client = try #require(Self.span(tracer.base, "properties", .client))
        let server = try #require(Self.span(tracer.base, "properties", .server))
        #expect(client.traceID.count == 32)
        #expect(server.traceID == client.traceID)
        #expect(server.parentSpanID == client.spanID)
    }

    @Test("streamed bodies: a streamed request counts what it sent, a streaming handler and a streamed reply none")
    func streamedBodies() async throws {
        let tracer = InMemoryTracer()
        let peers = InMemoryPeers(router: Self.router(), serverConfiguration: Self.tracing(tracer))
        try await peers.run(clientConfiguration: Self.tracing(tracer)) { connection in
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "count"),
                body: ChunkedBody(total: 50_000, chunk: 7_000)
            )
            #expect(String(buffer: reply.body) == "50000")
            let streamed = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "echo", text: "abc"))
            var received = 0
            for try await piece in streamed.body { received += piece.readableBytes }
            #expect(received == 3)
        }
        let sent = try #require(Self.span(tracer, "count", .client))
        #expect(sent.attributes["blip.request.size"]?.toSpanAttribute() == .int64(50_000))
        let handled = try #require(Self.span(tracer, "count", .server))
        #expect(handled.attributes["blip.request.size"] == nil)
        #expect(handled.attributes["blip.reply.size"]?.toSpanAttribute() == .int64(5))
        let streamedReply = try #require(Self.span(tracer, "echo", .client))
        #expect(streamedReply.attributes["blip.outcome"]?.toSpanAttribute() == .string("reply"))
        #expect(streamedReply.attributes["blip.reply.size"] == nil)
    }

    @Test("off by default: a tracer that is set but not enabled records nothing and adds no properties")
    func offByDefault() async throws {
        #expect(BLIPConnection.Configuration().tracing.isEnabled == false)
        let tracer = InMemoryTracer()
        var configuration = BLIPConnection.Configuration()
        configuration.tracing.tracer = tracer
        configuration.tracing.propagatesTraceContext = true
        let peers = InMemoryPeers(router: Self.router(), serverConfiguration: configuration)
        let names = try await peers.run(clientConfiguration: configuration) {
            String(buffer: try await $0.sendRequest(BLIPRequest(profile: "properties")).body)
        }
        #expect(names == "Profile")
        #expect(tracer.finishedSpans.isEmpty)
        #expect(tracer.activeSpans.isEmpty)
        #expect(tracer.performedContextInjections.isEmpty)
    }
}

/// An in-memory tracer that propagates W3C trace context (`traceparent`), as swift-otel's propagator does,
/// with W3C-sized identifiers.
struct W3CTestTracer: Tracer {
    let base: InMemoryTracer

    /// Identifiers of W3C's sizes: 32 and 16 hexadecimal digits.
    final class HexIDs: Sendable {
        private let next = Atomic<UInt64>(1)

        func make(digits: Int) -> String {
            let text = String(self.next.add(1, ordering: .relaxed).oldValue, radix: 16)
            return String(repeating: "0", count: digits - text.count) + text
        }
    }

    init() {
        let ids = HexIDs()
        self.base = InMemoryTracer(
            idGenerator: .init(nextTraceID: { ids.make(digits: 32) }, nextSpanID: { ids.make(digits: 16) })
        )
    }

    func startSpan<Instant: TracerInstant>(
        _ operationName: String,
        context: @autoclosure () -> ServiceContext,
        ofKind kind: SpanKind,
        at instant: @autoclosure () -> Instant,
        function: String,
        file fileID: String,
        line: UInt
    ) -> InMemorySpan {
        self.base.startSpan(
            operationName,
            context: context(),
            ofKind: kind,
            at: instant(),
            function: function,
            file: fileID,
            line: line
        )
    }

    func forceFlush() {}

    func activeSpan(identifiedBy context: ServiceContext) -> InMemorySpan? {
        self.base.activeSpan(identifiedBy: context)
    }

    func inject<Carrier, Inject: Injector>(
        _ context: ServiceContext,
        into carrier: inout Carrier,
        using injector: Inject
    ) where Inject.Carrier == Carrier {
        guard let span = context.inMemorySpanContext else { return }
        injector.inject("00-\(span.traceID)-\(span.spanID)-01", forKey: "traceparent", into: &carrier)
    }

    func extract<Carrier, Extract: Extractor>(
        _ carrier: Carrier,
        into context: inout ServiceContext,
        using extractor: Extract
    ) where Extract.Carrier == Carrier {
        guard let value = extractor.extract(key: "traceparent", from: carrier) else { return }
        let fields = value.split(separator: "-")
        guard fields.count == 4, fields[0] == "00", fields[1].count == 32, fields[2].count == 16 else { return }
        context.inMemorySpanContext = InMemorySpanContext(
            traceID: String(fields[1]),
            spanID: String(fields[2]),
            parentSpanID: nil
        )
    }
}
