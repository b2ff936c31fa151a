/// The boolean flags of a frame, independent of how a dialect lays them out on the wire.
package struct BLIPFrameFlags: OptionSet, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: UInt8

    package init(rawValue: UInt8) {
        self.rawValue = rawValue
    }

    /// The frame's data is compressed (BLIP 3: this frame's slice went through the deflate stream;
    /// seed and BLIP 2: the message body is gzip).
    package static let compressed = BLIPFrameFlags(rawValue: 1 << 0)
    /// The message should overtake normal traffic.
    package static let urgent = BLIPFrameFlags(rawValue: 1 << 1)
    /// A request that must not be answered.
    package static let noReply = BLIPFrameFlags(rawValue: 1 << 2)
    /// More frames of this message follow.
    package static let moreComing = BLIPFrameFlags(rawValue: 1 << 3)
    /// An internal message (seed and BLIP 2 only; never used in practice).
    package static let meta = BLIPFrameFlags(rawValue: 1 << 4)

    package var description: String {
        var names: [String] = []
        if self.contains(.compressed) { names.append("compressed") }
        if self.contains(.urgent) { names.append("urgent") }
        if self.contains(.noReply) { names.append("noReply") }
        if self.contains(.moreComing) { names.append("moreComing") }
        if self.contains(.meta) { names.append("meta") }
        return "[" + names.joined(separator: ",") + "]"
    }
}
