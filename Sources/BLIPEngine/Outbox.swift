package import DequeModule

/// What the out-box needs to know about a queued message.
package protocol BLIPOutboxEntry: AnyObject {
    var isUrgent: Bool { get }
    /// Whether at least one frame of the message has been sent.
    var hasStarted: Bool { get }
}

/// The single queue of messages waiting to send their next frame (digest 7.9).
///
/// The writer pops the head, sends one frame of it and, while frames remain, puts it back: normal
/// messages at the tail (round robin), urgent ones by LiteCore's insertion rule, which lets an urgent
/// message overtake normal traffic without ever passing another urgent message or, when new, a message
/// that has not started (so first frames stay in order).
package struct BLIPOutbox<Entry: BLIPOutboxEntry> {
    private var queue: Deque<Entry> = []

    package init() {}

    package var isEmpty: Bool { self.queue.isEmpty }
    package var count: Int { self.queue.count }
    package var first: Entry? { self.queue.first }
    package var entries: Deque<Entry> { self.queue }

    package mutating func popFirst() -> Entry? {
        self.queue.popFirst()
    }

    /// Queues `entry`; `isNew` is true when it has never been queued before (LiteCore: has sent nothing).
    package mutating func push(_ entry: Entry, isNew: Bool) {
        guard entry.isUrgent && self.queue.count >= 2 else {
            self.queue.append(entry)
            return
        }
        // Scan from the tail toward the head. Stop two places after an urgent message (leaving one
        // message between them), or, for a new message, right after one that has not started. Reaching
        // the head without stopping puts the entry right behind it.
        var index = self.queue.count - 1
        while index >= 0 {
            let scanned = self.queue[index]
            if scanned.isUrgent {
                self.queue.insert(entry, at: min(index + 2, self.queue.count))
                return
            }
            if isNew && !scanned.hasStarted {
                self.queue.insert(entry, at: index + 1)
                return
            }
            index -= 1
        }
        self.queue.insert(entry, at: 1)
    }

    /// Removes `entry` if it is queued; returns whether it was.
    @discardableResult
    package mutating func remove(_ entry: Entry) -> Bool {
        guard let index = self.queue.firstIndex(where: { $0 === entry }) else { return false }
        self.queue.remove(at: index)
        return true
    }

    /// Empties the queue, returning what it held.
    package mutating func removeAll() -> [Entry] {
        // Copying an empty Deque into an Array writes the shared empty-array storage, which
        // ThreadSanitizer reports between connections closing at once: there is nothing to copy anyway.
        guard !self.queue.isEmpty else { return [] }
        defer { self.queue.removeAll() }
        return Array(self.queue)
    }
}
