internal import BLIP
internal import Foundation
internal import NIOConcurrencyHelpers
internal import NIOCore

/// The standard test server profiles of performance.md: `echo`, `sink`, `error`, `stats`; no-reply
/// requests get no reply and unknown profiles ERR BLIP/404 (the connection does both). `source` is an
/// addition: it sends `Count` bytes back (`Data: random|text`, `Compress: yes`), for benchmarks of the
/// server-to-client direction; `stream-source` does the same with a streamed reply, for any `Count` up to
/// 16 GiB, from one 1 MiB chunk sent again and again. `whoami` answers with the connection's identity (the user name under
/// `serve --require-basic`), empty when it has none.
final class StandardProfiles: BLIPService {
    struct Counters: Codable {
        var echo = 0
        var sink = 0
        var source = 0
        var noReply = 0
        var error = 0
        var unhandled = 0
        var bytesIn = 0
        var bytesOut = 0
    }

    let counters = NIOLockedValueBox(Counters())
    /// `source` bodies, generated once per kind (at least the 64 MiB of the standard bulk workload) so that
    /// a timed transfer measures BLIP, not the data generator. Both generators' output for a smaller
    /// count is a prefix of that for a larger one.
    private let generated = NIOLockedValueBox<[BenchmarkData: ByteBuffer]>([:])

    private func sourceData(_ data: BenchmarkData, _ count: Int) -> ByteBuffer {
        self.generated.withLockedValue { generated in
            if let buffer = generated[data], buffer.readableBytes >= count {
                return buffer.getSlice(at: buffer.readerIndex, length: count)!
            }
            let buffer = data.bytes(max(count, 64 << 20))
            generated[data] = buffer
            return buffer.getSlice(at: buffer.readerIndex, length: count)!
        }
    }

    func registerHandlers(with router: inout BLIPRouter) {
        // Computed from the request alone: answered on the event loop, without a task (the benchmarks' server).
        router.registerSynchronous(profile: "echo") { request, context in
            self.count(request, context) { $0.echo += 1 }
            self.counters.withLockedValue { $0.bytesOut += request.body.readableBytes }
            return BLIPResponse(properties: request.properties, body: request.body, compressed: request.isCompressed)
        }
        router.registerStreaming(profile: "sink") { request, context in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            self.counters.withLockedValue {
                $0.sink += 1
                $0.bytesIn += total
                if !context.expectsReply { $0.noReply += 1 }
            }
            return BLIPResponse(properties: ["Count": "\(total)"], text: "\(total)")
        }
        router.register(profile: "source") { request, context in
            self.count(request, context) { $0.source += 1 }
            let count = Int(request.properties["Count"] ?? "0") ?? 0
            guard (0...(1 << 30)).contains(count) else {
                throw BLIPError(code: .payloadTooLarge, message: "Count must be 0 to 1 GiB")
            }
            let data = BenchmarkData(rawValue: request.properties["Data"] ?? "random") ?? .random
            self.counters.withLockedValue { $0.bytesOut += count }
            return BLIPResponse(
                properties: ["Count": "\(count)"],
                body: self.sourceData(data, count),
                compressed: request.properties["Compress"] == "yes"
            )
        }
        router.register(profile: "stream-source") { request, context in
            self.count(request, context) { $0.source += 1 }
            let count = Int(request.properties["Count"] ?? "0") ?? 0
            guard (0...(1 << 34)).contains(count) else {
                throw BLIPError(code: .payloadTooLarge, message: "Count must be 0 to 16 GiB")
            }
            let data = BenchmarkData(rawValue: request.properties["Data"] ?? "random") ?? .random
            self.counters.withLockedValue { $0.bytesOut += count }
            // Its own 1 MiB chunk, not the 64 MiB `source` keeps: the server must stay small while it streams.
            let body = RepeatedChunks(
                chunk: data.bytes(1 << 20),
                total: count,
                progress: Progress(enabled: false),
                name: "stream-source"
            )
            return BLIPResponse(properties: ["Count": "\(count)"], bodyStream: body)
        }
        router.register(profile: "error") { request, context in
            self.count(request, context) { $0.error += 1 }
            throw BLIPError(
                domain: BLIPError.Domain(rawValue: request.properties["Want-Error-Domain"] ?? "HTTP"),
                code: BLIPError.Code(rawValue: Int32(request.properties["Want-Error-Code"] ?? "409") ?? 409),
                message: request.properties["Want-Error-Message"] ?? "conflict"
            )
        }
        router.register(profile: "delay") { request, _ in
            let milliseconds = Int(request.properties["Milliseconds"] ?? "0") ?? -1
            guard (0...60_000).contains(milliseconds) else {
                throw BLIPError(code: .badRequest, message: "Milliseconds must be 0 to 60000")
            }
            try await Task.sleep(for: .milliseconds(milliseconds))
            return BLIPResponse()
        }
        router.register(profile: "call-peer") { request, context in
            try await Self.callPeer(request, context)
        }
        router.register(profile: "close-connection") { request, context in
            let code = BLIPCloseCode(rawValue: UInt16(request.properties["Close-Code"] ?? "1000") ?? 0)
            guard code.isSendable else {
                throw BLIPError(code: .badRequest, message: "Close-Code must be a code a close frame may carry")
            }
            // Returns once closed: the reply is never sent, and the client's pending requests fail with the code.
            await context.connection.close(code: code, reason: request.properties["Close-Reason"] ?? "")
            return BLIPResponse()
        }
        router.register(profile: "whoami") { _, context in
            BLIPResponse(text: context.identity.map { "\($0)" } ?? "")
        }
        router.register(profile: "stats") { request, context in
            self.count(request, context) { _ in }
            let encoder = JSONEncoder()
            encoder.outputFormatting = .sortedKeys
            let json = try encoder.encode(self.counters.withLockedValue { $0 })
            return BLIPResponse(properties: ["Content-Type": "application/json"], body: ByteBuffer(bytes: json))
        }
    }

    /// `call-peer`: the server asks the client something (the profile in `Call-Profile`, the same body,
    /// `Call-Property-X` as `X`, urgent with `Call-Urgent: yes`) and answers with the client's reply, or
    /// with its ERR; how the browser tests check a page's handlers.
    private static func callPeer(_ request: BLIPRequest, _ context: BLIPRequestContext) async throws -> BLIPResponse {
        guard let profile = request.properties["Call-Profile"] else {
            throw BLIPError(code: .badRequest, message: "Call-Profile is missing")
        }
        let prefix = "Call-Property-"
        var properties = BLIPProperties()
        for property in request.properties where property.name.hasPrefix(prefix) && property.name != prefix {
            properties[String(property.name.dropFirst(prefix.count))] = property.value
        }
        let call = BLIPRequest(
            profile: profile,
            properties: properties,
            body: request.body,
            urgent: request.properties["Call-Urgent"] == "yes"
        )
        let reply = try await context.connection.sendRequest(call)
        return BLIPResponse(properties: reply.properties, body: reply.body)
    }

    private func count(_ request: BLIPRequest, _ context: BLIPRequestContext, _ bump: (inout Counters) -> Void) {
        self.counters.withLockedValue { counters in
            bump(&counters)
            counters.bytesIn += request.body.readableBytes
            if !context.expectsReply { counters.noReply += 1 }
        }
    }
}
