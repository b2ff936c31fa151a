internal import BLIPWire
internal import NIOCore
internal import Tracing

/// The spans of one connection's requests (see ``BLIPConnection/TracingConfiguration``); a connection
/// without tracing has none, so that its requests pay one nil check. A class: an optional reference is
/// checked for nil in place, where an optional struct holding an existential is copied to be checked.
final class RequestTracer: Sendable {
    let tracer: any Tracer
    let propagatesTraceContext: Bool

    /// Made when the connection is created: a nil tracer is the one `InstrumentationSystem` has then.
    init?(_ configuration: BLIPConnection.TracingConfiguration) {
        guard configuration.isEnabled else { return nil }
        self.tracer = configuration.tracer ?? InstrumentationSystem.tracer
        self.propagatesTraceContext = configuration.propagatesTraceContext
    }

    /// What a span says about a request before it ends.
    struct RequestFacts {
        var properties: BLIPProperties
        var isUrgent: Bool
        var isCompressed: Bool
        var expectsReply: Bool
        /// Body bytes, when the body is whole.
        var size: Int?
        /// The peer's number, for a request handled here.
        var number: UInt64? = nil
    }

    // MARK: - Requests sent

    /// Sends a request inside a client span, a child of the caller's (`ServiceContext.current`). `send`
    /// gets the request with the span's trace context added when it is propagated. `replySize` tells a
    /// reply's body bytes (nil: none or streamed); `sentBytes`, those of a streamed request body once sent.
    func traceSent<Reply>(
        _ request: BLIPRequest,
        facts: RequestFacts,
        replySize: ((Reply) -> Int?)? = nil,
        sentBytes: ByteCounter? = nil,
        _ send: (BLIPRequest) async throws -> Reply
    ) async throws -> Reply {
        let (span, request) = self.startSending(request, facts: facts)
        do {
            let reply = try await send(request)
            Self.endSending(span, facts: facts, result: .success(reply), replySize: replySize, sentBytes: sentBytes)
            return reply
        } catch {
            Self.endSending(span, facts: facts, result: .failure(error), replySize: replySize, sentBytes: sentBytes)
            throw error
        }
    }

    /// Starts a request's client span; returns it, and the request with the span's trace context added when
    /// it is propagated.
    func startSending(_ request: BLIPRequest, facts: RequestFacts) -> (any Span, BLIPRequest) {
        let span = self.tracer.startSpan(Self.name(of: facts.properties), ofKind: .client)
        Self.describe(facts, on: span)
        var request = request
        if self.propagatesTraceContext {
            self.tracer.inject(span.context, into: &request.properties, using: PropertiesInjector())
        }
        return (span, request)
    }

    /// Ends a sent request's span with its outcome.
    static func endSending<Reply>(
        _ span: any Span,
        facts: RequestFacts,
        result: Result<Reply, any Error>,
        replySize: ((Reply) -> Int?)? = nil,
        sentBytes: ByteCounter? = nil
    ) {
        defer { span.end() }
        guard span.isRecording else { return }
        if let sentBytes { span.attributes["blip.request.size"] = sentBytes.total }
        switch result {
        case .success(let reply):
            span.attributes["blip.outcome"] = facts.expectsReply ? "reply" : "sent"
            if let size = replySize?(reply) { span.attributes["blip.reply.size"] = size }
        case .failure(let error):
            Self.record(error, on: span)
        }
    }

    // MARK: - Requests handled

    /// Starts the server span of a request about to be handled: part of the peer's trace when the request
    /// carries one and it is propagated, else the first span of a trace of its own.
    func startHandling(_ facts: RequestFacts) -> any Span {
        var context = ServiceContext.topLevel
        if self.propagatesTraceContext {
            self.tracer.extract(facts.properties, into: &context, using: PropertiesExtractor())
        }
        let span = self.tracer.startSpan(Self.name(of: facts.properties), context: context, ofKind: .server)
        Self.describe(facts, on: span)
        return span
    }

    /// Ends a handled request's span with what its handler returned, or the ERR reply made of what it
    /// threw; a handler that gave up because the connection closed or its task was cancelled ends with that.
    func endHandling(
        _ span: any Span,
        expectsReply: Bool,
        result: Result<BLIPResponse, BLIPError>,
        thrown: (any Error)?
    ) {
        defer { span.end() }
        guard span.isRecording else { return }
        switch result {
        case .success(let reply):
            span.attributes["blip.outcome"] = expectsReply ? "reply" : "handled"
            if expectsReply, let size = reply.tracedSize { span.attributes["blip.reply.size"] = size }
        case .failure(let error):
            if let thrown, thrown is CancellationError || thrown is BLIPConnectionError {
                Self.record(thrown, on: span)
            } else {
                Self.record(error, on: span)
            }
        }
    }

    // MARK: - Attributes

    private static func name(of properties: BLIPProperties) -> String {
        properties.profile ?? "BLIP request"
    }

    /// Attributes are built only for a span that records them (a no-op tracer's do not).
    private static func describe(_ facts: RequestFacts, on span: any Span) {
        guard span.isRecording else { return }
        var attributes = SpanAttributes()
        attributes["rpc.system"] = "blip"
        if let profile = facts.properties.profile { attributes["rpc.method"] = profile }
        if let size = facts.size { attributes["blip.request.size"] = size }
        if let number = facts.number { attributes["blip.request.number"] = Int64(truncatingIfNeeded: number) }
        attributes["blip.request.urgent"] = facts.isUrgent
        attributes["blip.request.compressed"] = facts.isCompressed
        attributes["blip.request.noreply"] = !facts.expectsReply
        span.attributes.merge(attributes)
    }

    /// An ERR reply, a cancellation, or the connection error that ended the request.
    private static func record(_ error: any Error, on span: any Span) {
        guard span.isRecording else { return }
        switch error {
        case let error as BLIPError:
            span.attributes["blip.outcome"] = "error"
            span.attributes["blip.error.domain"] = error.domain.rawValue
            span.attributes["blip.error.code"] = Int(error.code.rawValue)
        case is CancellationError:
            span.attributes["blip.outcome"] = "cancelled"
            return  // the caller gave up: not a failure of the request
        case let error as BLIPConnectionError:
            span.attributes["blip.outcome"] = "\(error.code)"
        default:
            span.attributes["blip.outcome"] = "failed"
        }
        span.recordError(error)
        span.setStatus(SpanStatus(code: .error))
    }
}

/// Writes a trace context into a request's properties.
private struct PropertiesInjector: Injector {
    func inject(_ value: String, forKey key: String, into carrier: inout BLIPProperties) {
        carrier[key] = value
    }
}

/// Reads a trace context from a request's properties.
private struct PropertiesExtractor: Extractor {
    func extract(key: String, from carrier: BLIPProperties) -> String? {
        carrier[key]
    }
}

extension RequestTracer.RequestFacts {
    /// A request about to be sent, with a whole body and a reply expected.
    static func sent(_ request: BLIPRequest) -> Self {
        Self(
            properties: request.properties,
            isUrgent: request.isUrgent,
            isCompressed: request.isCompressed,
            expectsReply: true,
            size: request.body.readableBytes
        )
    }
}

extension BLIPResponse {
    /// Body bytes for a span: nil when the body is streamed.
    var tracedSize: Int? { self.bodyStream == nil ? self.body.readableBytes : nil }
}

extension RequestTracer.RequestFacts {
    /// A request read whole, about to be handled.
    static func handled(_ request: BLIPRequest, number: UInt64, expectsReply: Bool) -> Self {
        Self(
            properties: request.properties,
            isUrgent: request.isUrgent,
            isCompressed: request.isCompressed,
            expectsReply: expectsReply,
            size: request.body.readableBytes,
            number: number
        )
    }

    /// A request whose body streams to its handler.
    static func handled(_ request: BLIPStreamedRequest, number: UInt64, expectsReply: Bool) -> Self {
        Self(
            properties: request.properties,
            isUrgent: request.isUrgent,
            isCompressed: request.isCompressed,
            expectsReply: expectsReply,
            number: number
        )
    }
}
