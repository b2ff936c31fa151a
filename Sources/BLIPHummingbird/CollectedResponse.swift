internal import BLIPWebSocket
internal import HTTPTypes
internal import Hummingbird
internal import HummingbirdCore
internal import Logging
internal import NIOCore
internal import NIOHTTPTypes

/// A refused upgrade's response, read into memory (it is a short explanation, bounded like the
/// standalone server's refusals) so that it can be written on the connection once the upgrade machinery
/// has handed it back to HTTP.
struct CollectedResponse: Sendable {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var body: ByteBuffer

    static let internalError = CollectedResponse(status: .internalServerError, text: "internal server error\n")

    init(status: HTTPResponse.Status, headers: HTTPFields = [:], body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    init(status: HTTPResponse.Status, text: String) {
        self.init(
            status: status,
            headers: [.contentType: "text/plain; charset=utf-8"],
            body: ByteBuffer(string: text)
        )
    }

    /// Reads `response`'s body; one over `BLIPUpgradeDecision.maximumRefusalBodySize` bytes, one that
    /// fails, or an informational status (a refusal must be final) is answered 500 instead.
    static func collect(_ response: Response, logger: Logger) async -> CollectedResponse {
        guard response.status.code >= 200 else {
            logger.error("the BLIP router answered an upgrade request with \(response.status.code); answered 500")
            return .internalError
        }
        let collector = BodyCollector(limit: BLIPUpgradeDecision.maximumRefusalBodySize)
        do {
            try await response.body.write(collector)
        } catch {
            logger.error(
                "the body of a refused upgrade's response could not be read; answered 500",
                metadata: ["blip.error": "\(error)"]
            )
            return .internalError
        }
        return CollectedResponse(status: response.status, headers: response.headers, body: collector.collected)
    }

    /// Writes the response and closes the connection, as the standalone server does after a refusal.
    func write(to http: NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, logger: Logger) async {
        var headers = self.headers
        headers[.contentLength] = String(self.body.readableBytes)
        headers[.transferEncoding] = nil
        headers[.connection] = "close"
        do {
            try await http.executeThenClose { _, outbound in
                try await outbound.write(
                    contentsOf: [
                        .head(HTTPResponse(status: self.status, headerFields: headers)),
                        .body(self.body),
                        .end(nil),
                    ]
                )
            }
        } catch {
            logger.debug("could not write a refused upgrade's response", metadata: ["blip.error": "\(error)"])
        }
    }
}

/// A response body writer that keeps what is written, up to a limit.
private final class BodyCollector: ResponseBodyWriter {
    struct TooLarge: Error {}

    let limit: Int
    var collected = ByteBuffer()

    init(limit: Int) {
        self.limit = limit
    }

    func write(_ buffer: ByteBuffer) async throws {
        guard self.collected.readableBytes + buffer.readableBytes <= self.limit else { throw TooLarge() }
        var buffer = buffer
        self.collected.writeBuffer(&buffer)
    }

    func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
