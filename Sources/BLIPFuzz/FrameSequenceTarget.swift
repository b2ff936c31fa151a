internal import BLIPWire
internal import NIOCore

/// Fuzz target (a): one direction of a connection's frames, in order, through a frame decoder and message
/// readers, as the engine uses them: the BLIP 3 running CRC and inflate stream carry from frame to frame,
/// and messages are assembled across frames (properties straddling frames, gzip bodies).
///
/// Input: a dialect byte, then frames, each a 16-bit little-endian length and that many bytes.
enum FrameSequenceTarget {
    /// Messages assembled at once, at most (a connection's own limit is higher; this keeps a run small).
    static let maximumOpenMessages = 256

    static func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var input = FuzzInput(data)
        let dialect = BLIPDialect.allCases[input.choice(BLIPDialect.allCases.count)]
        var configuration = BLIPFrameDecoder.Configuration()
        configuration.maximumInflatedFrameSize = 1 << 20
        let decoder = BLIPFrameDecoder(dialect: dialect, configuration: configuration)
        var readers: [MessageKey: BLIPMessageReader] = [:]

        while !input.isAtEnd {
            let frame = ByteBuffer(bytes: input.record())
            let decoded: BLIPDecodedFrame
            do {
                decoded = try decoder.decode(frame)
            } catch {
                try Self.check(error, frameLength: frame.readableBytes)
                return  // fatal for a connection: nothing after it counts
            }
            guard case .data(let dataFrame) = decoded else { continue }
            let key = MessageKey(dataFrame.header)
            var reader =
                readers.removeValue(forKey: key)
                ?? decoder.makeMessageReader(for: dataFrame.header, maximumBodySize: 4 << 20)
            do {
                let piece = try reader.append(dataFrame.payload)
                guard
                    piece.readableBytes <= dataFrame.payload.readableBytes || dialect != .blip3
                        || dataFrame.header.flags.contains(.compressed)
                else {
                    throw FuzzFailure("an uncompressed BLIP 3 frame produced more body than it carried")
                }
                if dataFrame.header.flags.contains(.moreComing) {
                    guard readers.count < Self.maximumOpenMessages else { return }
                    readers[key] = reader
                } else {
                    try reader.finish()
                }
            } catch let error as BLIPWireError {
                try Self.check(error, frameLength: frame.readableBytes)
                return
            } catch let failure as FuzzFailure {
                throw failure
            } catch {
                throw FuzzFailure("untyped error \(error)")
            }
        }
    }

    /// A decode error says where it happened; never before the start of what was decoded.
    private static func check(_ error: BLIPWireError, frameLength: Int) throws(FuzzFailure) {
        if let offset = error.offset, offset < 0 {
            throw FuzzFailure("negative error offset in a frame of \(frameLength) bytes: \(error)")
        }
    }
}

/// Requests and replies are numbered separately (ERR shares the reply's number space).
struct MessageKey: Hashable {
    var isRequest: Bool
    var number: UInt64

    init(_ header: BLIPFrameHeader) {
        self.isRequest = header.type == .request
        self.number = header.messageNumber
    }
}
