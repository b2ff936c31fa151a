import BLIPWire
import NIOCore

/// A message reassembled from the frames of one direction.
struct ReplayedMessage {
    var number: UInt64
    var type: BLIPMessageType
    var flags: BLIPFrameFlags
    var properties: BLIPProperties
    var body: ByteBuffer
    var frameCount: Int
}

/// Decodes the frames of one direction in order with one decoder, and reassembles their messages keyed by
/// (request or response, number), as an engine would; records every decoded frame.
struct DirectionReplay {
    let decoder: BLIPFrameDecoder
    private(set) var frames: [BLIPDecodedFrame] = []
    private(set) var completed: [ReplayedMessage] = []
    private var inProgress: [String: (reader: BLIPMessageReader, message: ReplayedMessage)] = [:]

    init(dialect: BLIPDialect, configuration: BLIPFrameDecoder.Configuration = .init()) {
        self.decoder = BLIPFrameDecoder(dialect: dialect, configuration: configuration)
    }

    var pendingCount: Int { self.inProgress.count }

    mutating func receive(_ frame: ByteBuffer) throws(BLIPWireError) {
        let decoded = try self.decoder.decode(frame)
        self.frames.append(decoded)
        guard case .data(let data) = decoded else { return }
        let key = "\(data.header.type == .request ? "MSG" : "RES")#\(data.header.messageNumber)"
        var entry =
            self.inProgress.removeValue(forKey: key)
            ?? (
                self.decoder.makeMessageReader(for: data.header),
                ReplayedMessage(
                    number: data.header.messageNumber,
                    type: data.header.type,
                    flags: data.header.flags.subtracting(.moreComing),
                    properties: [:],
                    body: ByteBuffer(),
                    frameCount: 0
                )
            )
        var piece = try entry.reader.append(data.payload)
        entry.message.body.writeBuffer(&piece)
        entry.message.frameCount += 1
        if data.header.flags.contains(.moreComing) {
            self.inProgress[key] = entry
        } else {
            try entry.reader.finish()
            entry.message.properties = entry.reader.properties!
            self.completed.append(entry.message)
        }
    }
}
