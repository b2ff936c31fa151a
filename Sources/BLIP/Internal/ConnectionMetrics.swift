internal import BLIPWire
internal import CoreMetrics

/// Counters through swift-metrics, created once per connection and bumped per message (bytes per frame),
/// never per byte; with no metrics backend they cost a no-op call.
struct ConnectionMetrics: Sendable {
    let messagesSent: Counter
    let messagesReceived: Counter
    let bytesSent: Counter
    let bytesReceived: Counter
    let errorRepliesSent: Counter
    let errorRepliesReceived: Counter
    let unhandledRequests: Counter
    let protocolErrors: Counter
    let failedRequests: Counter

    init(dialect: BLIPDialect) {
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
