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

func pattern(_ count: Int) -> ByteBuffer {
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
            let offset = self.offset
            return ByteBuffer(
                bytes: [UInt8](unsafeUninitializedCapacity: size) { bytes, count in
                    for index in 0..<size { bytes[index] = UInt8(truncatingIfNeeded: (index + offset) * 31) }
                    count = size
                }
            )
        }
    }
}
