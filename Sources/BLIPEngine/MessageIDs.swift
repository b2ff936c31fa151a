/// The engine's handle for a message we send, given when it is queued (before it has a wire number:
/// requests are numbered when their first frame leaves).
package struct BLIPOutgoingID: Hashable, Sendable, Comparable, CustomStringConvertible {
    package var rawValue: UInt64

    package init(rawValue: UInt64) {
        self.rawValue = rawValue
    }

    package static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
    package var description: String { "out#\(self.rawValue)" }
}

/// A message the peer is sending us: a request (numbered by the peer) or a response (carrying the
/// number of our request). The two number spaces are independent.
package struct BLIPIncomingID: Hashable, Sendable, CustomStringConvertible {
    package var isRequest: Bool
    package var number: UInt64

    package init(isRequest: Bool, number: UInt64) {
        self.isRequest = isRequest
        self.number = number
    }

    package var description: String { "\(self.isRequest ? "MSG" : "RES")#\(self.number)" }
}
