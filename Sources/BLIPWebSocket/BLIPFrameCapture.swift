package import BLIPWire
internal import Dispatch
internal import Foundation
package import NIOCore
internal import Synchronization

/// Writes every frame of one connection to a folder, one file per WebSocket binary message, in the
/// Fixtures capture format: `fNNN-<c2s|s2c>-<TYPE><number>.bin`, NNN counting both directions in order.
/// `blip decode` (or any decoder) reads such a folder back. Files are written on a queue of their own, so
/// the event loop only copies the bytes.
package final class BLIPFrameCapture: Sendable {
    package let directory: String
    let dialect: BLIPDialect
    private let index = Atomic<Int>(0)
    private let queue = DispatchQueue(label: "blip.capture")

    /// Creates `directory` (and its parents) if needed.
    package init(directory: String, dialect: BLIPDialect) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        self.directory = directory
        self.dialect = dialect
    }

    /// A capture in a new numbered folder `connection-NNN` under `parent`.
    package static func forNewConnection(under parent: String, dialect: BLIPDialect, counter: CaptureCounter) throws
        -> BLIPFrameCapture
    {
        let number = counter.value.add(1, ordering: .relaxed).newValue
        return try BLIPFrameCapture(directory: "\(parent)/connection-\(Self.padded(number))", dialect: dialect)
    }

    /// Records one frame; `clientToServer` names its direction.
    package func record(_ frame: ByteBuffer, clientToServer: Bool) {
        let index = self.index.add(1, ordering: .relaxed).oldValue
        let header = frame.withUnsafeReadableBytes { try? BLIPFrameHeader.read(from: $0, dialect: self.dialect) }
        let type = header.map { "\($0.header.type)\($0.header.messageNumber)" } ?? "BAD"
        let name = "f\(Self.padded(index))-\(clientToServer ? "c2s" : "s2c")-\(type).bin"
        let bytes = Data(frame.readableBytesView)
        let path = "\(self.directory)/\(name)"
        self.queue.async {
            _ = FileManager.default.createFile(atPath: path, contents: bytes)
        }
    }

    /// Writes a file of text beside the frames (the proxy's handshake files), in order with them.
    package func write(named name: String, _ text: String) {
        let path = "\(self.directory)/\(name)"
        let bytes = Data(text.utf8)
        self.queue.async {
            _ = FileManager.default.createFile(atPath: path, contents: bytes)
        }
    }

    /// Waits until every recorded frame is on disk.
    package func flush() {
        self.queue.sync {}
    }

    private static func padded(_ number: Int) -> String {
        let digits = String(number)
        return digits.count >= 3 ? digits : String(repeating: "0", count: 3 - digits.count) + digits
    }
}

/// Numbers capture folders (one counter per server, one for the process's clients).
package final class CaptureCounter: Sendable {
    let value = Atomic<Int>(0)

    package init() {}
}
