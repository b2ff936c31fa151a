/// The three BLIP wire dialects this package speaks.
///
/// A dialect is a value the codec and engine consult (flag table, tokens, compression, checksum, flow
/// control), not a fork of the code. See `Docs/WireFormat.md` and the protocol digest, section 1.
public enum BLIPDialect: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// BLIP 3 (digest D4): Couchbase Lite 2.x and later, Sync Gateway. Subprotocol `BLIP_3+<app>`.
    /// Running CRC-32 per direction, one raw-deflate stream per direction, ACKs, no property tokens.
    case blip3
    /// BLIP 2 as implemented 2015-2017 (digest D3). Subprotocol `BLIP`. Type mask 0x07, meta flag 0x80,
    /// per-message gzip body, ACKs, the 14-entry token table.
    case blip2
    /// The 2013 "seed" dialect of WebSockets-Cocoa (digest D2). No subprotocol. Type mask 0x03,
    /// gzip body, tokens, no ACKs, no checksum.
    case seed

    public var description: String { self.rawValue }

    /// Whether ACK frames and flow control exist (BLIP 2 and 3).
    public var hasFlowControl: Bool { self != .seed }

    /// Whether property strings that equal a token-table entry travel as one byte (seed and BLIP 2).
    public var usesPropertyTokens: Bool { self != .blip3 }

    /// Whether every non-ACK frame ends with the direction's running CRC-32 (BLIP 3).
    public var hasChecksum: Bool { self == .blip3 }

    /// Whether compression is one raw-deflate stream per direction over frames (BLIP 3), rather than a
    /// gzip stream per message body (seed and BLIP 2).
    public var compressesFrames: Bool { self == .blip3 }

    /// Whether empty keys and values may be sent. WebSockets-Cocoa's parser rejects them (digest 5.2).
    public var allowsEmptyPropertyStrings: Bool { self != .seed }

    /// Bytes of trailer after the frame body of a non-ACK frame.
    public var trailerLength: Int { self.hasChecksum ? 4 : 0 }

    /// The default gzip level of the original implementations (5 for WebSockets-Cocoa, 6 elsewhere).
    public var defaultCompressionLevel: Int32 { self == .seed ? 5 : 6 }

    // MARK: Flag layout on the wire

    var typeMask: UInt8 { self == .seed ? 0x03 : 0x07 }
    var compressedBit: UInt8 { self == .seed ? 0x04 : 0x08 }
    var urgentBit: UInt8 { self == .seed ? 0x08 : 0x10 }
    var noReplyBit: UInt8 { self == .seed ? 0x10 : 0x20 }
    var moreComingBit: UInt8 { self == .seed ? 0x20 : 0x40 }
    /// The meta flag's wire bit; BLIP 3 has none.
    var metaBit: UInt8? {
        switch self {
        case .blip3: nil
        case .blip2: 0x80
        case .seed: 0x40
        }
    }
    /// BLIP 3 peers truncate the flags varint to 8 bits; the older Cocoa peers reject values above 0xFF.
    var rejectsFlagsAbove0xFF: Bool { self != .blip3 }
}
