public import Tracing

extension BLIPConnection {
    /// Distributed tracing of a connection's requests with swift-distributed-tracing. Off by default.
    ///
    /// When on, every request sent gets a client span, and every request a handler answers gets a server
    /// span in whose context the handler runs (`ServiceContext.current`), so that what the handler does and
    /// the requests it sends join it. A span's name is the request's `Profile`; its attributes follow
    /// OpenTelemetry's RPC conventions (`rpc.system` is `blip`, `rpc.method` the profile) plus:
    ///
    /// - `blip.request.size`, `blip.reply.size`: body bytes, where the body is whole (a streamed request
    ///   body is counted as it is read from its sequence; streamed bodies received are not counted);
    /// - `blip.request.urgent`, `blip.request.compressed`, `blip.request.noreply`: the request's flags;
    /// - `blip.request.number`: the peer's number for a handled request;
    /// - `blip.outcome`: `reply`, `error` (an ERR reply), `sent` (a no-reply request that left), `handled`
    ///   (a no-reply request whose handler returned), `cancelled`, or the ``BLIPConnectionError/Code`` that
    ///   ended it (`timedOut`, `connectionClosed`, …);
    /// - `blip.error.domain`, `blip.error.code`: an ERR reply's domain and code. Error outcomes also set the
    ///   span's status to error and record the error.
    ///
    /// A client span ends when the send call returns: for ``BLIPConnection/sendRequestStreamingReply(_:timeout:progress:)``
    /// when the reply's properties arrive. A server span ends when the handler returns, with what it
    /// returned: a streamed reply body is sent after, and a reply that cannot be encoded (sent as ERR
    /// BLIP/500 instead) is not seen by the span. A handler that throws because the connection closed or
    /// its task was cancelled ends with that outcome, not as the BLIP/501 it is answered with.
    ///
    /// Requests delivered unhandled to ``BLIPConnection/incomingRequests`` get no span: the application
    /// answers them, and traces them, itself.
    public struct TracingConfiguration: Sendable {
        /// Whether requests are traced at all.
        public var isEnabled = false
        /// The tracer; nil: the one bootstrapped with `InstrumentationSystem.bootstrap(_:)` (swift-otel's, for
        /// instance), looked up when the connection is created.
        public var tracer: (any Tracer)?
        /// Carry the trace context in request properties: a request sent carries its span's context, in
        /// the properties the tracer propagates (`traceparent` and `tracestate` with W3C trace context, as
        /// swift-otel does), and a handled request that carries one is traced as part of that trace. Both
        /// ends opt in; without it a handled request's span starts a trace of its own. Off by default: the
        /// properties tell the peer about the application's traces, and only a peer that is trusted with
        /// them (and whose traces it may join) should get or give them.
        public var propagatesTraceContext = false

        /// Tracing off (``disabled``).
        public init() {}

        /// Tracing off, the default.
        public static var disabled: Self { Self() }

        /// Tracing on, with `tracer` (nil: the bootstrapped one).
        public static func enabled(tracer: (any Tracer)? = nil, propagatesTraceContext: Bool = false) -> Self {
            var configuration = Self()
            configuration.isEnabled = true
            configuration.tracer = tracer
            configuration.propagatesTraceContext = propagatesTraceContext
            return configuration
        }
    }
}
