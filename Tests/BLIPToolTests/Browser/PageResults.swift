/// What the browser test page (`Tests/BrowserPage/checks.js`) returns: its checks, the timings, and its
/// decoding of the captured fixture frames.
struct PageResults: Decodable {
    struct Check: Decodable {
        var name: String
        var ok: Bool
        var detail: String?
        var ms: Double?
    }

    struct RoundTrips: Decodable {
        var count: Int
        var bodyBytes: Int
        var totalMs: Double
        var meanMs: Double
        var p50Ms: Double
        var p99Ms: Double
        var maxMs: Double
    }

    struct Bulk: Decodable {
        var bytes: Int
        var upMs: Double
        var downMs: Double
        var upMiBps: Double
        var downMiBps: Double
        var maxUnacknowledgedBytes: Int
    }

    /// The same work over a plain WebSocket (`blip-raw`) to the same server, in the same run.
    struct RawBaseline: Decodable {
        var roundTripMeanMs: Double
        var upMs: Double
        var downMs: Double
        var upMiBps: Double
        var downMiBps: Double
    }

    var fatal: String?
    var userAgent: String?
    var subprotocol: String?
    var checks: [Check]?
    var roundTrips: RoundTrips?
    var bulk: Bulk?
    var rawBaseline: RawBaseline?
    var fixtures: [String: [String: DecodedDirection]]?
}

/// One direction of a captured scenario as a decoder sees it; the page's and the Swift decoder's must be
/// equal.
struct DecodedDirection: Decodable, Equatable, CustomStringConvertible {
    struct Message: Decodable, Equatable {
        var number: UInt64
        var type: String
        var urgent: Bool
        var noReply: Bool
        var compressed: Bool
        var properties: [[String]]
        var bodyLength: Int
        var bodySHA256: String
        var frames: Int
    }

    struct ACK: Decodable, Equatable {
        var type: String
        var number: UInt64
        var bytes: UInt64
    }

    var messages: [Message]?
    var acks: [ACK]?
    var error: String?

    var description: String {
        if let error { return "error: \(error)" }
        let messages = (self.messages ?? []).map {
            "\($0.type)#\($0.number) u\($0.urgent ? 1 : 0)n\($0.noReply ? 1 : 0)z\($0.compressed ? 1 : 0) "
                + "\($0.properties) \($0.bodyLength) B \($0.bodySHA256.prefix(12)) \($0.frames) frames"
        }
        let acks = (self.acks ?? []).map { "\($0.type)#\($0.number)=\($0.bytes)" }
        return (messages + acks).joined(separator: "; ")
    }
}
