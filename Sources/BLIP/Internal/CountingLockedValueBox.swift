internal import NIOConcurrencyHelpers

/// The connection's lock around its state, counting how often it is taken. The count is kept inside the
/// lock (no atomic), so it costs one add per acquisition; it gives the locks-per-message figures of the
/// in-memory benchmark and the tests that bound them.
struct CountingLockedValueBox<Value: Sendable>: Sendable {
    private struct Counted: Sendable {
        var value: Value
        var acquisitions: UInt64
    }

    private let box: NIOLockedValueBox<Counted>

    init(_ value: Value) {
        self.box = NIOLockedValueBox(Counted(value: value, acquisitions: 0))
    }

    func withLockedValue<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        try self.box.withLockedValue { counted in
            counted.acquisitions &+= 1
            return try body(&counted.value)
        }
    }

    /// Acquisitions so far, this read not included.
    var acquisitions: UInt64 { self.box.withLockedValue { $0.acquisitions } }
}
