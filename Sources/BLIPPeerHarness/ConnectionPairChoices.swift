/// Where a connection-pair session's choices come from: a seeded generator (the seeded suite) or the
/// fuzzer's bytes (the `connection` fuzz target). Every choice is bounded, so every source makes a
/// complete session.
package protocol ConnectionPairChoices {
    /// A number in `0..<count` (`count` > 0).
    mutating func pick(_ count: Int) -> Int
    /// No more choices to make: the session stops stepping, settles and closes.
    var isExhausted: Bool { get }
}

extension ConnectionPairChoices {
    package var isExhausted: Bool { false }

    /// True `percent` times in a hundred.
    mutating func chance(_ percent: Int) -> Bool {
        self.pick(100) < percent
    }

    /// One of `options`.
    mutating func one<Element>(of options: [Element]) -> Element {
        options[self.pick(options.count)]
    }
}

extension SimulationRandom: ConnectionPairChoices {
    package mutating func pick(_ count: Int) -> Int {
        self.int(in: 0...(count - 1))
    }
}
