/// How much of a message may be sent ahead of the peer's ACKs (``BLIPConnection/Configuration/sendWindow``).
public enum BLIPSendWindow: Hashable, Sendable {
    /// Always this many bytes (go-blip and LiteCore: 128 000).
    case fixed(Int)
    /// Starts at `initial` and grows while a message is held back by the window and the round trip (a
    /// frame's send to the ACK covering it) stays near its minimum, up to `maximum`.
    case adaptive(initial: Int, maximum: Int)
}
