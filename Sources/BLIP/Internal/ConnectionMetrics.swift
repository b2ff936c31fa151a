internal import BLIPWire
internal import CoreMetrics

/// Counters through swift-metrics, bumped per message (bytes per frame), never per byte; with no metrics
/// backend they cost a no-op call. Their labels and dimensions name no connection, so every connection of a
/// dialect shares one set (``forDialect(_:)``): made once, on the first connection (after the application has
/// bootstrapped its metrics backend, as swift-metrics asks), not nine objects per connection.
struct ConnectionMetrics: Sendable {
    /// One set per dialect, each made on first use.
    private static let blip3 = ConnectionMetrics(dialect: .blip3)
    private static let blip2 = ConnectionMetrics(dialect: .blip2)
    private static let seed = ConnectionMetrics(dialect: .seed)

    static func forDialect(_ dialect: BLIPDialect) -> ConnectionMetrics {
        switch dialect {
        case .blip3: Self.blip3
        case .blip2: Self.blip2
        case .seed: Self.seed
        }
    }

    let messagesSent: Counter
    let messagesReceived: Counter
    let bytesSent: Counter
    let bytesReceived: Counter
    let errorRepliesSent: Counter
    let errorRepliesReceived: Counter
    let unhandledRequests: Counter
    let protocolErrors: Counter
    let failedRequests: Counter

    private init(dialect: BLIPDialect) {
        let dimensions = [("dialect", dialect.rawValue)]
        self.messagesSent = Counter(label: "blip_messages_sent_total", dimensions: dimensions)
        self.messagesReceived = Counter(label: "blip_messages_received_total", dimensions: dimensions)
        self.bytesSent = Counter(label: "blip_bytes_sent_total", dimensions: dimensions)
        self.bytesReceived = Counter(label: "blip_bytes_received_total", dimensions: dimensions)
        self.errorRepliesSent = Counter(label: "blip_error_replies_sent_total", dimensions: dimensions)
        self.errorRepliesReceived = Counter(label: "blip_error_replies_received_total", dimensions: dimensions)
        self.unhandledRequests = Counter(label: "blip_unhandled_requests_total", dimensions: dimensions)
        self.protocolErrors = Counter(label: "blip_protocol_errors_total", dimensions: dimensions)
        self.failedRequests = Counter(label: "blip_failed_requests_total", dimensions: dimensions)
    }
}
