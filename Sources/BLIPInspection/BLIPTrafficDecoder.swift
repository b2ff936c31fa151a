internal import BLIPWebSocket
package import BLIPWire
internal import Crypto
internal import Foundation
package import NIOCore

/// Follows one direction of a BLIP connection frame by frame, as a third party watching it would: the
/// checksum and the shared deflate stream of BLIP 3, gzip bodies and tokens of the older dialects, ACKs.
/// It reports each frame and, when a message's last frame arrives, the whole message, without keeping
/// bodies: only their size, digest and first bytes. `blip decode` and ``BLIPInspectingProxy`` share it.
///
/// After ``decode(_:at:)`` throws, the direction cannot be followed any further (the checksum or the
/// inflater's state is lost); callers stop feeding it.
package final class BLIPTrafficDecoder {
    /// Messages whose last frame has not arrived yet, at most: a peer that opens more is reported as an
    /// error instead of growing this decoder's memory (each may hold up to a property block, 100 KiB, until
    /// its properties are complete).
    package static let maximumMessagesInProgress = 256
    /// Body bytes kept of each message for ``Message/bodyText`` and ``Message/bodyPrefix``.
    package static let keptBodyBytes = 4096
    /// The largest storage (one socket read's) that a message's ``Message/bodyPrefix`` may share instead of
    /// copying from.
    static let sharedStorageLimit = 64 * 1024

    /// One frame, as decoded.
    package struct Frame: Sendable {
        package var header: BLIPFrameHeader
        /// The frame's size on the wire (the WebSocket message's payload).
        package var length: Int
        package var kind: Kind

        package enum Kind: Sendable {
            /// A data frame: `dataLength` bytes of the message after inflating, `bodyLength` as the frame
            /// decoder reports it, and the BLIP 3 checksum, already checked.
            case data(dataLength: Int, bodyLength: Int, checksum: UInt32?)
            case ack(byteCount: UInt64)
            /// An ACK whose count does not decode; peers ignore it.
            case malformedACK(String)
            /// A frame type this dialect does not define; peers ignore it.
            case unknownType
        }
    }

    /// A message whose last frame has arrived.
    package struct Message: Sendable {
        package var number: UInt64
        package var type: BLIPMessageType
        /// The first frame's flags, without `moreComing`.
        package var flags: BLIPFrameFlags
        package var properties: BLIPProperties
        package var bodyLength: Int
        /// Lowercase hex SHA-256 of the (inflated) body; nil for a body over the decoder's
        /// `maximumDigestedBodySize`.
        package var bodySHA256: String?
        /// The body as text, when it is shorter than ``BLIPTrafficDecoder/keptBodyBytes`` and valid UTF-8.
        package var bodyText: String?
        /// The body's first bytes (at most ``BLIPTrafficDecoder/keptBodyBytes``). For a message of one
        /// uncompressed frame, a slice of that frame's buffer (which holds at most 64 KiB); otherwise a copy.
        package var bodyPrefix: ByteBuffer
        package var frameCount: Int
        /// When the first frame arrived: the time given to ``BLIPTrafficDecoder/decode(_:at:)`` with it.
        package var started: NIODeadline
    }

    /// What one frame gave: itself, and the message it completed, if any.
    package struct Step: Sendable {
        package var frame: Frame
        package var message: Message?
    }

    private struct InProgress {
        var reader: BLIPMessageReader
        var header: BLIPFrameHeader
        var hasher: SHA256? = SHA256()
        var bodyLength = 0
        var prefix = ByteBuffer()
        var frameCount = 0
        var started: NIODeadline
    }

    package let dialect: BLIPDialect
    /// Bodies up to this size get a digest; hashing is the costliest part of following bulk traffic.
    package let maximumDigestedBodySize: Int
    private let frames: BLIPFrameDecoder
    private var inProgress: [MessageKey: InProgress] = [:]

    private struct MessageKey: Hashable {
        var isRequest: Bool
        var number: UInt64
    }

    package init(dialect: BLIPDialect, maximumDigestedBodySize: Int = .max) {
        self.dialect = dialect
        self.maximumDigestedBodySize = maximumDigestedBodySize
        self.frames = BLIPFrameDecoder(dialect: dialect)
    }

    /// The messages begun and not finished, as `MSG#n` / `RPY#n`, in number order.
    package var incompleteMessages: [String] {
        self.inProgress.keys.sorted { ($0.isRequest ? 0 : 1, $0.number) < ($1.isRequest ? 0 : 1, $1.number) }
            .map { "\($0.isRequest ? "MSG" : "RPY")#\($0.number)" }
    }

    /// Decodes the next frame of this direction (one WebSocket binary message's payload), which arrived at
    /// `time` (a message's ``Message/started`` is its first frame's).
    package func decode(_ bytes: ByteBuffer, at time: NIODeadline = .now()) throws(BLIPTrafficDecodingError) -> Step {
        let decoded: BLIPDecodedFrame
        do {
            decoded = try self.frames.decode(bytes)
        } catch {
            throw BLIPTrafficDecodingError(header: nil, wire: error)
        }
        switch decoded {
        case .ack(let ack):
            return Step(
                frame: Frame(header: ack.header, length: bytes.readableBytes, kind: .ack(byteCount: ack.byteCount))
            )
        case .malformedACK(let header, let error):
            return Step(frame: Frame(header: header, length: bytes.readableBytes, kind: .malformedACK("\(error)")))
        case .unknownType(let header):
            return Step(frame: Frame(header: header, length: bytes.readableBytes, kind: .unknownType))
        case .data(let data):
            let frame = Frame(
                header: data.header,
                length: bytes.readableBytes,
                kind: .data(
                    dataLength: data.payload.readableBytes,
                    bodyLength: data.bodyLength,
                    checksum: data.checksum
                )
            )
            return Step(frame: frame, message: try self.append(data, at: time))
        }
    }

    private func append(_ data: BLIPDataFrame, at time: NIODeadline) throws(BLIPTrafficDecodingError) -> Message? {
        let key = MessageKey(isRequest: data.header.type == .request, number: data.header.messageNumber)
        var message: InProgress
        // Most messages are one frame, and none is in progress: the table is not hashed into then.
        if !self.inProgress.isEmpty, let existing = self.inProgress.removeValue(forKey: key) {
            message = existing
        } else {
            guard self.inProgress.count < Self.maximumMessagesInProgress else {
                throw BLIPTrafficDecodingError(
                    header: data.header,
                    wire: nil,
                    text: "more than \(Self.maximumMessagesInProgress) messages in progress at once"
                )
            }
            message = InProgress(
                reader: self.frames.makeMessageReader(for: data.header),
                header: data.header,
                started: time
            )
        }
        do {
            let piece = try message.reader.append(data.payload)
            message.frameCount += 1
            message.bodyLength += piece.readableBytes
            if message.bodyLength > self.maximumDigestedBodySize {
                message.hasher = nil
            } else if message.hasher != nil {
                piece.withUnsafeReadableBytes { message.hasher!.update(bufferPointer: $0) }
            }
            let room = Self.keptBodyBytes - message.prefix.readableBytes
            if room > 0, let kept = piece.getSlice(at: piece.readerIndex, length: min(room, piece.readableBytes)) {
                if message.frameCount == 1 && !data.header.flags.contains(.moreComing)
                    && !data.header.flags.contains(.compressed) && kept.storageCapacity <= Self.sharedStorageLimit
                {
                    // A message of one uncompressed frame (most are) keeps a slice of that frame: no copy. A
                    // message still in progress, or a body inflated into the decoder's reused scratch, or a
                    // frame reassembled into a large buffer, copies, so that a message kept by the caller
                    // never holds on to more than one read's worth of storage.
                    message.prefix = kept
                } else {
                    message.prefix.writeImmutableBuffer(kept)
                }
            }
            if data.header.flags.contains(.moreComing) {
                self.inProgress[key] = message
                return nil
            }
            try message.reader.finish()
        } catch {
            throw BLIPTrafficDecodingError(header: data.header, wire: error)
        }
        let digest = message.hasher.map { Self.hex($0.finalize()) }
        let text =
            message.bodyLength < Self.keptBodyBytes
            ? message.prefix.withUnsafeReadableBytes {
                String(validating: $0.bindMemory(to: UInt8.self), as: UTF8.self)
            }
            : nil
        return Message(
            number: message.header.messageNumber,
            type: message.header.type,
            flags: message.header.flags.subtracting(.moreComing),
            properties: message.reader.properties ?? BLIPProperties(),
            bodyLength: message.bodyLength,
            bodySHA256: digest,
            bodyText: text,
            bodyPrefix: message.prefix,
            frameCount: message.frameCount,
            started: message.started
        )
    }
}

extension BLIPTrafficDecoder {
    private static let hexDigits = Array("0123456789abcdef".utf8)

    /// Lowercase hex, through a table and straight into the string's storage: per message,
    /// `String(_:radix:)` per byte, and later iterating the digest as a sequence, showed in profiles.
    static func hex(_ digest: some ContiguousBytes) -> String {
        digest.withUnsafeBytes { bytes in
            String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                Self.hexDigits.withUnsafeBufferPointer { digits in
                    var index = 0
                    while index < bytes.count {
                        let byte = bytes[index]
                        out[2 &* index] = digits[Int(byte &>> 4)]
                        out[2 &* index &+ 1] = digits[Int(byte & 0x0F)]
                        index &+= 1
                    }
                }
                return bytes.count * 2
            }
        }
    }
}

/// Why a direction could not be followed past a frame.
package struct BLIPTrafficDecodingError: Error, Sendable, CustomStringConvertible {
    /// The frame's header, when it decoded.
    package var header: BLIPFrameHeader?
    /// The codec's error, when it was the codec that failed.
    package var wire: BLIPWireError?
    package var description: String

    init(header: BLIPFrameHeader?, wire: BLIPWireError?, text: String? = nil) {
        self.header = header
        self.wire = wire
        let what = text ?? wire.map { "\($0)" } ?? "undecodable"
        self.description = header.map { "\($0): \(what)" } ?? what
    }
}
