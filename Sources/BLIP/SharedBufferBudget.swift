internal import NIOConcurrencyHelpers
internal import Synchronization

/// A budget for what the peers of many connections (a server's) make them hold together.
///
/// Each connection bounds what its own peer can make it hold (``BLIPConnection/Configuration/incomingBufferBudget``),
/// but not the sum over connections: a thousand peers each within its budget could take gigabytes. Sharing
/// one of these, the connections count their buffered bytes here too; past ``limit`` each connection's
/// budget becomes at most its even share of the limit, so those holding the most are slowed first (ACKs
/// withheld, reading paused even where it would hold their own handlers up, new requests refused), while a
/// connection holding little goes on as before. A connection paused for the shared budget resumes when the
/// total is back within it.
package final class SharedBufferBudget: Sendable {
    package let limit: Int
    private let total = Atomic<Int>(0)
    private let connections = Atomic<Int>(0)
    /// Connections paused for this budget, to be told when there is room again.
    private let waiting = NIOLockedValueBox<[ObjectIdentifier: @Sendable () -> Void]>([:])
    private let waiters = Atomic<Bool>(false)
    /// The one connection let on past its share though the budget is exceeded (0: none), by
    /// ``connectionKey(_:)``: see ``exempt(_:)``.
    private let exemptConnection = Atomic<UInt>(0)

    /// Whether a connection waits for room: what a release asks before scheduling a wake. Sequentially
    /// consistent with the total: a waiter stores this and then reads the total, a release changes the total
    /// and then reads this, and one of the two must see the other (else nobody wakes the waiter).
    package var hasWaiters: Bool { self.waiters.load(ordering: .sequentiallyConsistent) }

    package init(limit: Int) {
        self.limit = limit
    }

    /// Bytes held by every connection together.
    package var bytes: Int { self.total.load(ordering: .sequentiallyConsistent) }
    package var openConnections: Int { self.connections.load(ordering: .relaxed) }
    package var isExceeded: Bool { self.bytes > self.limit }
    /// A connection's budget while the total is past the limit: the limit shared evenly.
    package var share: Int { self.limit / max(1, self.openConnections) }

    func connectionOpened() { self.connections.add(1, ordering: .relaxed) }
    func connectionClosed() { self.connections.subtract(1, ordering: .relaxed) }
    func add(_ bytes: Int) { self.total.add(bytes, ordering: .sequentiallyConsistent) }
    func subtract(_ bytes: Int) { self.total.subtract(bytes, ordering: .sequentiallyConsistent) }

    /// `wake` is called (once, after any lock) when the total is back within the limit.
    func wait(_ id: ObjectIdentifier, wake: @escaping @Sendable () -> Void) {
        self.waiting.withLockedValue { $0[id] = wake }
        self.waiters.store(true, ordering: .sequentiallyConsistent)
        self.wakeIfRoom()  // the room may have come back in between
    }

    func stopWaiting(_ id: ObjectIdentifier) {
        self.waiting.withLockedValue { $0[id] = nil }
    }

    /// Whether connection `id`, over its share but holding only messages still arriving (nothing it holds
    /// can be freed without reading on), may read on: one such connection at a time. Pausing every one of
    /// them would leave them all waiting for each other, since none could finish a message; the one let on
    /// finishes its messages (its peer is still held to its own budget by ACKs), and the total can fall.
    func exempt(_ id: ObjectIdentifier) -> Bool {
        let key = Self.connectionKey(id)
        let (exchanged, current) = self.exemptConnection.compareExchange(
            expected: 0,
            desired: key,
            ordering: .sequentiallyConsistent
        )
        return exchanged || current == key
    }

    /// Connection `id` no longer reads on past its share: the waiting connections decide again, so that
    /// another may take its place.
    func endExemption(_ id: ObjectIdentifier) {
        let key = Self.connectionKey(id)
        guard
            self.exemptConnection.compareExchange(expected: key, desired: 0, ordering: .sequentiallyConsistent)
                .exchanged
        else { return }
        self.wakeAll()
    }

    private static func connectionKey(_ id: ObjectIdentifier) -> UInt {
        UInt(bitPattern: id)
    }

    /// Tells the waiting connections, if the total is within the limit. Called with no lock held.
    func wakeIfRoom() {
        guard self.hasWaiters, !self.isExceeded else { return }
        self.wakeAll()
    }

    /// Tells every waiting connection to decide again. Called with no lock held.
    private func wakeAll() {
        guard self.hasWaiters else { return }
        let wakes = self.waiting.withLockedValue { waiting -> [@Sendable () -> Void] in
            defer {
                waiting.removeAll()
                self.waiters.store(false, ordering: .sequentiallyConsistent)
            }
            return Array(waiting.values)
        }
        for wake in wakes { wake() }
    }
}
