internal import Foundation
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
            let handle = self.handle
            let path = self.path
            let data = try await NIOThreadPool.singleton.runIfActive { () throws -> Data in
                do {
                    return try handle.read(upToCount: BodyFile.pieceSize) ?? Data()
                } catch {
                    throw ToolError("cannot read --body-file \(path): \(error.localizedDescription)")
                }
            }
            guard !data.isEmpty else {
                self.isFinished = true
                return nil
            }
            return ByteBuffer(bytes: data)
        }
    }

    /// The whole body, for the one path that cannot stream (a request that asks for no reply).
    func readAll() async throws -> ByteBuffer {
        var body = ByteBuffer()
        for try await piece in self { body.writeImmutableBuffer(piece) }
        return body
    }
}
