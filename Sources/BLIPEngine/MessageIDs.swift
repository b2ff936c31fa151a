/// The engine's handle for a message we send, given when it is queued (before it has a wire number:
/// requests are numbered when their first frame leaves).
public struct BLIPOutgoingID: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var rawValue: UInt64

    public init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    public var description: String { "out#\(self.rawValue)" }
}

/// A message the peer is sending us: a request (numbered by the peer) or a response (carrying the
/// number of our request). The two number spaces are independent.
public struct BLIPIncomingID: Hashable, Sendable, CustomStringConvertible {
    public var isRequest: Bool
    public var number: UInt64

    public init(isRequest: Bool, number: UInt64) {
        self.isRequest = isRequest
        self.number = number
    }

    public var description: String { "\(self.isRequest ? "MSG" : "RES")#\(self.number)" }
}
