internal import DequeModule

/// The order ``BLIPRouter/HandlerOrder/serial`` hands requests on in: their request numbers, which the
/// peer gives in the order it starts sending them, whatever order their last frames arrive in.
///
/// BLIP interleaves the frames of the messages in flight, so a small request sent after a large one
/// routinely completes first. Every request is recorded here when it starts arriving; one that is ready
/// (complete, or settled without a handler) waits here until every request before it has been released.
/// Only the connection's lock guards it.
struct SerialOrder {
    /// What a request that is ready comes to once its turn comes.
    enum Item: Sendable {
        /// A handler to dispatch (whole or streamed).
        case work(ConnectionCore.Work)
        /// A synchronous handler to dispatch.
        case immediate(ConnectionCore.ImmediateWork)
        /// A request for ``BLIPConnection/incomingRequests``.
        case deliver(BLIPIncomingRequest)
        /// Nothing: the request needs no handler (it was refused, answered by the connection, or failed).
        case settled
    }

    /// Requests that have started arriving and have not been released, by number (ascending).
    private var unreleased: Deque<UInt64> = []
    /// Those of ``unreleased`` that are ready, with the bytes they count against the buffer budget.
    private var ready: [UInt64: (item: Item, charge: Int)] = [:]
    /// Ready streamed requests: their bodies' unread bytes wait for the same earlier request.
    private(set) var heldStreams: Set<UInt64> = []
    /// Bytes of ready requests waiting for an earlier one (streamed bodies apart): memory that only
    /// reading more from the peer can free.
    private(set) var heldCharge = 0

    var isEmpty: Bool { self.unreleased.isEmpty }
    var hasReadyItems: Bool { !self.ready.isEmpty }
    /// Requests tracked: for tests that check a connection leaves nothing behind.
    var count: Int { self.unreleased.count + self.ready.count }
    /// The earliest request not released: the one every later ready request waits for.
    var first: UInt64? { self.unreleased.first }

    /// A request started arriving. Numbers mostly come in order; a request whose property block straddled
    /// frames can start after a later one, and is put in its place.
    mutating func started(_ number: UInt64) {
        guard let last = self.unreleased.last, number < last else {
            self.unreleased.append(number)
            return
        }
        let index = self.unreleased.firstIndex { $0 > number } ?? self.unreleased.endIndex
        self.unreleased.insert(number, at: index)
    }

    /// Whether `number` is tracked (it started arriving and is not released).
    func isTracked(_ number: UInt64) -> Bool {
        self.ready[number] == nil && self.unreleased.contains(number)
    }

    /// `number` is ready: it waits for its turn. False when it is not tracked (the caller goes on at once).
    mutating func makeReady(_ number: UInt64, _ item: Item, charge: Int) -> Bool {
        guard self.isTracked(number) else { return false }
        self.ready[number] = (item, charge)
        self.heldCharge += charge
        if case .work(.handleStreaming) = item { self.heldStreams.insert(number) }
        return true
    }

    /// Whether a request that is ready now would have to wait: an earlier one is still arriving, here or
    /// (properties incomplete) in the engine.
    func wouldWait(_ number: UInt64, firstAwaitingProperties: UInt64?) -> Bool {
        if let first = self.unreleased.first, first < number { return true }
        if let awaiting = firstAwaitingProperties, awaiting < number { return true }
        return false
    }

    /// Takes the next request whose turn it is, if it is ready and no earlier request is still arriving in
    /// the engine (`firstAwaitingProperties`).
    mutating func next(firstAwaitingProperties: UInt64?) -> Item? {
        guard let first = self.unreleased.first, let entry = self.ready[first] else { return nil }
        if let awaiting = firstAwaitingProperties, awaiting < first { return nil }
        self.unreleased.removeFirst()
        self.ready.removeValue(forKey: first)
        self.heldCharge -= entry.charge
        self.heldStreams.remove(first)
        return entry.item
    }

    /// Empties the order (the connection closed), returning what waited: their `deinit`s may call back into
    /// the connection, so they go after its lock.
    mutating func removeAll() -> [Item] {
        let items = self.ready.values.map(\.item)
        self.unreleased.removeAll()
        self.ready.removeAll()
        self.heldStreams.removeAll()
        self.heldCharge = 0
        return items
    }
}
