internal import BLIPPeerHarness

/// Fuzz target (d): two whole connections (``BLIPSteppedConnection``: the production rules of buffer
/// budget, ACK withholding, handler slots, serial order, draining and reply bookkeeping, with no tasks and
/// no I/O), stepped by the fuzzer's bytes: every choice of BLIPPeerHarness's connection-pair session
/// (limits, sends, frame moves, handler ends, cancels, drains, closes) is read from the input.
///
/// Invariants checked: those of the session (see ConnectionPairSimulation): after every step, no
/// connection closes on its own, none holds more than its hard limit or runs more handlers than its slots,
/// serial handlers start in order; every request ends exactly once as its fate allows; once settled or
/// closed, neither side keeps bookkeeping.
enum ConnectionPairTarget {
    static let maximumSteps = 400

    static func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var choices = FuzzChoices(input: FuzzInput(data))
        let report = ConnectionPairSimulation.run(choices: &choices, maximumSteps: Self.maximumSteps)
        if !report.violations.isEmpty { throw FuzzFailure("\(report)") }
    }
}

/// The fuzzer's bytes as a session's choices: one byte per choice of up to 256 options, two beyond.
private struct FuzzChoices: ConnectionPairChoices {
    var input: FuzzInput

    mutating func pick(_ count: Int) -> Int {
        count <= 256 ? self.input.choice(count) : self.input.uint16() % count
    }

    var isExhausted: Bool { self.input.isAtEnd }
}
