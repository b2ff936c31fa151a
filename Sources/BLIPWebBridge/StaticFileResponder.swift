internal import BLIPWebSocket
internal import Foundation
internal import NIOCore
internal import NIOHTTP1
internal import NIOPosix

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Answers a plain `GET` or `HEAD` on a `BLIPWebSocketServer` with a static file (``BLIPStaticFiles``).
///
/// Opening and reading happen on NIO's blocking thread pool, a 64 KiB chunk at a time, and the next chunk
/// is read only when the previous one has been written: a slow reader holds one chunk, not the file. The
/// connection closes after each response, as the server's other plain-HTTP answers do. The request must
/// arrive within the server's handshake timeout like any other; once a file's body starts, that timeout
/// gives way to one per chunk (``BLIPStaticFiles/writeTimeout``), so a large file is not cut off but a
/// client that stops reading is closed.
struct StaticFileResponder: PlainHTTPResponder {
    static let chunkSize = 64 * 1024

    /// The directory after symbolic links are resolved: every file served must resolve to a path under it.
    let root: String?
    let servesBrowserClient: Bool
    /// How long one chunk may take to be written before the client is given up on.
    let writeTimeout: TimeAmount
    let threadPool: NIOThreadPool

    init(_ files: BLIPStaticFiles, threadPool: NIOThreadPool = .singleton) throws {
        if let directory = files.directory {
            guard let root = Self.resolved(directory), root != "/", Self.isDirectory(root) else {
                throw BLIPStaticFiles.NotADirectory(path: directory)
            }
            self.root = root
        } else {
            self.root = nil
        }
        self.servesBrowserClient = files.servesBrowserClient
        self.writeTimeout = TimeAmount(files.writeTimeout)
        self.threadPool = threadPool
    }

    /// Whether an address is this machine's: the only clients served unless
    /// ``BLIPStaticFiles/servesRemoteClients`` is on.
    static func isLoopback(_ address: SocketAddress?) -> Bool {
        switch address {
        case .unixDomainSocket?: return true
        case .v4?, .v6?:
            guard let ip = address?.ipAddress else { return false }
            return ip.hasPrefix("127.") || ip == "::1" || ip.lowercased().hasPrefix("::ffff:127.")
        case nil: return false
        }
    }

    /// Writes the answer to `head` and closes the connection.
    func respond(to head: HTTPRequestHead, context: ChannelHandlerContext, origins: BrowserOriginRule) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        guard origins.allowsAnyHost || Self.isLoopback(context.channel.remoteAddress) else {
            return Self.answer(.forbidden, "static files are served to this machine only\n", head, loopBound)
        }
        guard origins.allowsFiles(host: head.headers.first(name: "Host")) else {
            return Self.answer(.forbidden, "the Host must name this machine\n", head, loopBound)
        }
        guard head.method == .GET || head.method == .HEAD else {
            return Self.answer(.methodNotAllowed, "GET or HEAD\n", head, loopBound, extra: [("Allow", "GET, HEAD")])
        }
        switch StaticPath(target: head.uri) {
        case .refused(let badRequest):
            Self.answer(
                badRequest ? .badRequest : .notFound,
                badRequest ? "bad path\n" : "not found\n",
                head,
                loopBound
            )
        case .browserClient(let module):
            guard self.servesBrowserClient else { return Self.answer(.notFound, "not found\n", head, loopBound) }
            let bytes = module ? BLIPBrowserClient.module : BLIPBrowserClient.typeDeclarations
            let type = StaticContentType.forFile(named: module ? "blip.js" : "blip.d.ts")
            Self.writeHead(.ok, contentType: type, length: bytes.count, head, loopBound)
            if head.method == .GET {
                context.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: bytes)))), promise: nil)
            }
            Self.end(loopBound)
        case .file(let segments):
            guard let root = self.root else { return Self.answer(.notFound, "not found\n", head, loopBound) }
            let eventLoop = context.eventLoop
            self.threadPool.runIfActive(eventLoop: eventLoop) { OpenedFile(root: root, segments: segments) }
                .whenComplete { result in
                    guard case .success(let file?) = result else {
                        return Self.answer(.notFound, "not found\n", head, loopBound)
                    }
                    let type = StaticContentType.forFile(named: segments.last ?? "")
                    Self.writeHead(.ok, contentType: type, length: file.size, head, loopBound)
                    guard head.method == .GET else {
                        file.closeDescriptor()
                        return Self.end(loopBound)
                    }
                    // A large file may take longer than the handshake allows; each chunk gets its own bound.
                    loopBound.value.pipeline.syncOperations.removeHandshakeTimeout()
                    self.sendChunks(of: file, from: 0, loopBound)
                }
        }
    }

    /// Reads the next chunk on the pool and writes it; the next read waits for that write.
    private func sendChunks(of file: OpenedFile, from offset: Int, _ context: NIOLoopBound<ChannelHandlerContext>) {
        let eventLoop = context.value.eventLoop
        guard offset < file.size else {
            file.closeDescriptor()
            return Self.end(context)
        }
        let allocator = context.value.channel.allocator
        let length = min(Self.chunkSize, file.size - offset)
        self.threadPool.runIfActive(eventLoop: eventLoop) { try file.read(length, at: offset, allocator: allocator) }
            .flatMap { chunk in
                // A client that stops reading is closed, instead of holding the file open forever.
                let deadline = eventLoop.scheduleTask(in: self.writeTimeout) { context.value.close(promise: nil) }
                return context.value.writeAndFlush(NIOAny(HTTPServerResponsePart.body(.byteBuffer(chunk)))).map {
                    deadline.cancel()
                    return chunk.readableBytes
                }
            }
            .whenComplete { result in
                switch result {
                case .success(let sent):
                    self.sendChunks(of: file, from: offset + sent, context)
                case .failure:
                    // The file changed under us or the client left: the response cannot be completed.
                    file.closeDescriptor()
                    context.value.close(promise: nil)
                }
            }
    }

    private static func answer(
        _ status: HTTPResponseStatus,
        _ text: String,
        _ head: HTTPRequestHead,
        _ context: NIOLoopBound<ChannelHandlerContext>,
        extra: [(String, String)] = []
    ) {
        let body = ByteBuffer(string: text)
        Self.writeHead(
            status,
            contentType: "text/plain; charset=utf-8",
            length: body.readableBytes,
            head,
            context,
            extra
        )
        if head.method != .HEAD {
            context.value.write(NIOAny(HTTPServerResponsePart.body(.byteBuffer(body))), promise: nil)
        }
        Self.end(context)
    }

    private static func writeHead(
        _ status: HTTPResponseStatus,
        contentType: String,
        length: Int,
        _ head: HTTPRequestHead,
        _ context: NIOLoopBound<ChannelHandlerContext>,
        _ extra: [(String, String)] = []
    ) {
        var headers = HTTPHeaders([
            ("Content-Type", contentType),
            ("Content-Length", String(length)),
            ("X-Content-Type-Options", "nosniff"),
            ("Cache-Control", "no-cache"),
            ("Connection", "close"),
        ])
        headers.add(contentsOf: extra)
        let response = HTTPResponseHead(version: head.version, status: status, headers: headers)
        context.value.write(NIOAny(HTTPServerResponsePart.head(response)), promise: nil)
    }

    private static func end(_ context: NIOLoopBound<ChannelHandlerContext>) {
        context.value.writeAndFlush(NIOAny(HTTPServerResponsePart.end(nil))).whenComplete { _ in
            context.value.close(promise: nil)
        }
    }

    /// `path` with every symbolic link resolved, or nil when it does not exist.
    static func resolved(_ path: String) -> String? {
        guard let pointer = realpath(path, nil) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    static func isDirectory(_ path: String) -> Bool {
        (try? FileManager.default.attributesOfItem(atPath: path)[.type] as? FileAttributeType) == .typeDirectory
    }
}

/// A regular file under a static root, open for reading. Used from the thread pool only, one call at a
/// time, then closed once.
final class OpenedFile: @unchecked Sendable {
    let descriptor: CInt
    let size: Int

    /// The file `segments` name under `root`, or nil when there is none that may be served: missing, not a
    /// regular file (a directory names its `index.html` only with a trailing slash), or resolving outside
    /// `root` through a symbolic link.
    init?(root: String, segments: [String]) {
        let candidate = ([root] + segments).joined(separator: "/")
        guard let real = StaticFileResponder.resolved(candidate), real.hasPrefix(root + "/") else { return nil }
        // A link inside may not lead to a hidden name either (`config -> .git/config`).
        guard !real.dropFirst(root.count + 1).split(separator: "/").contains(where: { $0.hasPrefix(".") }) else {
            return nil
        }
        guard (try? FileManager.default.attributesOfItem(atPath: real)[.type]) as? FileAttributeType == .typeRegular
        else { return nil }
        // Non-blocking, so that a FIFO swapped in since cannot hold a pool thread; its size from the
        // descriptor itself (a FIFO or socket has none and is refused).
        let descriptor = open(real, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        let size = lseek(descriptor, 0, SEEK_END)
        guard size >= 0 else {
            _ = close(descriptor)
            return nil
        }
        self.descriptor = descriptor
        self.size = Int(size)
    }

    struct ReadFailed: Error {}

    func read(_ length: Int, at offset: Int, allocator: ByteBufferAllocator) throws -> ByteBuffer {
        var buffer = allocator.buffer(capacity: length)
        let count = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { pointer in
            max(0, pread(self.descriptor, pointer.baseAddress, length, off_t(offset)))
        }
        // A file that shrank while being sent: its Content-Length can no longer be kept.
        guard count > 0 else { throw ReadFailed() }
        return buffer
    }

    func closeDescriptor() {
        _ = close(self.descriptor)
    }
}
