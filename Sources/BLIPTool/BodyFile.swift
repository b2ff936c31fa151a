internal import Foundation
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import NIOPosix

/// A `--body-file` read as it is sent: any readable path (a file, `/dev/stdin`, a pipe, a process
/// substitution) or `-` for standard input, pulled one piece at a time only as fast as the connection
/// sends it, so a body of any size never sits in memory. Reads block, so they run on NIO's thread pool,
/// never on the task's executor.
struct BodyFile: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// How much one read asks for: four times the engine's low watermark, so the send queue never runs dry
    /// between reads.
    static let pieceSize = 256 * 1024

    private let handle: FileHandle
    private let path: String

    /// Opens `path`; failures name the path and say why in plain words.
    init(path: String) throws {
        if path == "-" {
            self.handle = FileHandle.standardInput
            self.path = path
            return
        }
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            throw ToolError("cannot read --body-file \(path): no such file")
        }
        guard !isDirectory.boolValue else { throw ToolError("cannot read --body-file \(path): it is a folder") }
        guard let handle = FileHandle(forReadingAtPath: path) else {
            throw ToolError("cannot read --body-file \(path): permission denied")
        }
        self.handle = handle
        self.path = path
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handle: self.handle, path: self.path) }

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: FileHandle
        let path: String
        var isFinished = false

        mutating func next() async throws -> ByteBuffer? {
            guard !self.isFinished else { return nil }
            let data = try await BodyFile.read(self.handle, path: self.path)
            guard !data.isEmpty else {
                self.isFinished = true
                return nil
            }
            return ByteBuffer(bytes: data)
        }
    }

    /// One read, on NIO's thread pool. A read from a pipe blocks until its writer writes or closes, which
    /// cannot be interrupted: a cancelled wait (a `--timeout`, a reply that came first, a closed
    /// connection) returns at once with `CancellationError` and leaves the read to finish on its own.
    static func read(_ handle: FileHandle, path: String) async throws -> Data {
        let outcome = NIOLockedValueBox<
            (result: Result<Data, any Error>?, waiter: CheckedContinuation<Data, any Error>?)
        >(
            (nil, nil)
        )
        NIOThreadPool.singleton.submit { _ in
            let result = Result { () throws -> Data in
                do {
                    return try handle.read(upToCount: BodyFile.pieceSize) ?? Data()
                } catch {
                    throw ToolError("cannot read --body-file \(path): \(error.localizedDescription)")
                }
            }
            let waiter = outcome.withLockedValue { state in
                defer { state.waiter = nil }
                if state.waiter == nil { state.result = result }
                return state.waiter
            }
            waiter?.resume(with: result)
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let ready = outcome.withLockedValue { state -> Result<Data, any Error>? in
                    if let result = state.result { return result }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.waiter = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            let waiter = outcome.withLockedValue { state in
                defer { state.waiter = nil }
                if state.waiter != nil { state.result = .failure(CancellationError()) }
                return state.waiter
            }
            waiter?.resume(throwing: CancellationError())
        }
    }

    /// The whole body, for the one path that cannot stream (a request that asks for no reply).
    func readAll() async throws -> ByteBuffer {
        var body = ByteBuffer()
        for try await piece in self { body.writeImmutableBuffer(piece) }
        return body
    }
}
