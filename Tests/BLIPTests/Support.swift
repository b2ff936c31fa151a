import BLIP
import NIOCore
import Testing

/// A server connection over one end of an in-memory pair, running until the test ends.
struct InMemoryPeers {
    let client: BLIPInMemoryTransport
    let server: BLIPInMemoryTransport
    let serverConnection: BLIPConnection

    init(
        dialect: BLIPDialect = .blip3,
        router: BLIPRouter,
        serverConfiguration: BLIPConnection.Configuration = .init()
    ) {
        (self.client, self.server) = BLIPInMemoryTransport.makePair(dialect: dialect)
        self.serverConnection = BLIPConnection(
            transport: self.server,
            configuration: serverConfiguration,
            router: router
        )
    }

    /// Runs `body` with a client connection while the server runs.
    func run<T: Sendable>(
        clientConfiguration: BLIPConnection.Configuration = .init(),
        clientRouter: BLIPRouter = BLIPRouter(),
        _ body: @Sendable @escaping (BLIPConnection) async throws -> T
    ) async throws -> T {
        let server = self.serverConnection
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await server.run()
                return nil
            }
            let result = try await withBLIPConnection(
                over: self.client,
                configuration: clientConfiguration,
                router: clientRouter,
                body
            )
            await server.close()
            try await group.waitForAll()
            return result
        }
    }
}

/// The standard test profiles: echo, error, sink.
func standardRouter() -> BLIPRouter {
    var router = BLIPRouter()
    router.register(profile: "echo") { request, _ in
        BLIPResponse(properties: request.properties, body: request.body, compressed: request.isCompressed)
    }
    router.register(profile: "error") { request, _ in
        throw BLIPError(
            domain: BLIPError.Domain(rawValue: request.properties["Want-Error-Domain"] ?? "HTTP"),
            code: BLIPError.Code(rawValue: Int32(request.properties["Want-Error-Code"] ?? "409") ?? 409),
            message: request.properties["Want-Error-Message"] ?? "conflict",
            properties: ["X-Extra": "yes"]
        )
    }
    router.register(profile: "sink") { request, _ in
        BLIPResponse(properties: ["Count": "\(request.body.readableBytes)"], text: "\(request.body.readableBytes)")
    }
    return router
}

/// The first 4 MiB of every pattern, built once: bodies up to that size are slices of it (no copy). Building
/// each body anew held both threads of the cooperative pool for seconds when a test made 10 000 of them in a
/// debug build, long enough to starve every timing-sensitive test running beside it.
private let patternSource = makePattern(4 << 20)

func pattern(_ count: Int) -> ByteBuffer {
    if count <= patternSource.readableBytes {
        return patternSource.getSlice(at: patternSource.readerIndex, length: count)!
    }
    return makePattern(count)
}

private func makePattern(_ count: Int) -> ByteBuffer {
    // Doubling copies (memcpy) rather than a byte at a time: a debug build takes seconds per 64 MiB the slow
    // way, on the two threads every suite's tasks share.
    var buffer = ByteBuffer(bytes: Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8))
    buffer.reserveCapacity(count)
    while buffer.readableBytes < count {
        var copy = buffer.getSlice(
            at: buffer.readerIndex,
            length: min(buffer.readableBytes, count - buffer.readableBytes)
        )!
        buffer.writeBuffer(&copy)
    }
    return buffer.getSlice(at: buffer.readerIndex, length: count)!
}

/// A body produced in chunks, as an AsyncSequence.
struct ChunkedBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let total: Int
    let chunk: Int

    func makeAsyncIterator() -> Iterator { Iterator(remaining: self.total, chunk: self.chunk) }

    struct Iterator: AsyncIteratorProtocol {
        var remaining: Int
        let chunk: Int
        var offset = 0

        mutating func next() async throws -> ByteBuffer? {
            guard self.remaining > 0 else { return nil }
            let size = Swift.min(self.chunk, self.remaining)
            self.remaining -= size
            defer { self.offset += size }
            // Byte i of the body is i * 31 mod 256: a cycle of 256, so a chunk is a slice of one precomputed
            // run (a byte-at-a-time loop in a debug build held an event loop for seconds).
            let start = self.offset % 256
            if start + size <= chunkedBodySource.count {
                return ByteBuffer(bytes: chunkedBodySource[start..<(start + size)])
            }
            let offset = self.offset
            return ByteBuffer(bytes: (0..<size).lazy.map { UInt8(truncatingIfNeeded: ($0 + offset) * 31) })
        }
    }
}

/// i * 31 mod 256 for i in 0 ..< 128 KiB + 256: every chunk of a ``ChunkedBody`` up to 128 KiB.
private let chunkedBodySource: [UInt8] = (0..<((128 << 10) + 256)).map { UInt8(truncatingIfNeeded: $0 * 31) }
