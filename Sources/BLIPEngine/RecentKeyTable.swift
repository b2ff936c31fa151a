/// A map from integer keys given out in increasing order, whose entries nearly all leave soon after, in
/// about the order they came (messages queued to send).
///
/// A dictionary hashes the key on every insertion and removal, and rehashes its neighbours on each removal:
/// several hundred instructions per message. Here recent entries sit in a window of slots indexed by key. An
/// entry that stays while many later ones come and go (a long message) moves to a dictionary, so that the
/// window never holds more than twice its entries plus `slack` slots after an insertion.
///
/// For values of a layout known at compile time (a class, a struct of such fields): with payloads of a
/// resilient layout (`CheckedContinuation`) every slot operation becomes a call into the runtime.
struct RecentKeyTable<Value> {
    /// Empty slots the window may hold beyond as many as it has entries.
    static var slack: Int { 64 }

    /// The key of `window[0]`.
    private var base: UInt64 = 0
    /// Empty, or starting with an entry (never with an empty slot).
    private var window = RecentKeyWindow<Value>()
    private var windowCount = 0
    private var stragglers: [UInt64: Value] = [:]

    var count: Int { self.windowCount + self.stragglers.count }
    var isEmpty: Bool { self.count == 0 }

    /// Every entry, in no particular order.
    var values: [Value] { self.window.slots.compactMap { $0 } + self.stragglers.values }

    /// The key of an entry that satisfies `predicate`, if any (a linear search).
    func firstKey(where predicate: (Value) -> Bool) -> UInt64? {
        for (offset, slot) in self.window.slots.enumerated() {
            if let slot, predicate(slot) { return self.base + UInt64(offset) }
        }
        return self.stragglers.first { predicate($0.value) }?.key
    }

    /// Slots in the window, entries or empty (for tests of its bound).
    var windowSlots: Int { self.window.count }

    subscript(key: UInt64) -> Value? {
        get {
            if key >= self.base, key - self.base < UInt64(self.window.count) {
                return self.window[Int(key - self.base)]
            }
            return self.stragglers.isEmpty ? nil : self.stragglers[key]
        }
        set {
            if let newValue {
                self.insert(newValue, for: key)
            } else {
                self.removeValue(forKey: key)
            }
        }
    }

    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> Value? {
        if key >= self.base, key - self.base < UInt64(self.window.count) {
            let index = Int(key - self.base)
            guard let value = self.window[index] else { return nil }
            self.window[index] = nil
            self.windowCount -= 1
            self.dropLeadingEmptySlots()
            return value
        }
        return self.stragglers.isEmpty ? nil : self.stragglers.removeValue(forKey: key)
    }

    mutating func removeAll() {
        self.window.removeAll(keepingCapacity: false)
        self.windowCount = 0
        self.stragglers.removeAll()
    }

    private mutating func insert(_ value: Value, for key: UInt64) {
        if !self.stragglers.isEmpty, self.stragglers[key] != nil {
            // An entry that left the window is updated where it is: a window restarted at or before its
            // key would otherwise hold a second copy of it, counted twice and never removed.
            self.stragglers[key] = value
            return
        }
        if self.windowCount == 0 {
            self.window.removeAll(keepingCapacity: true)
            self.base = key
        }
        guard key >= self.base else {
            self.stragglers[key] = value  // older than every entry of the window
            return
        }
        let offset = key - self.base
        if offset < UInt64(self.window.count) {
            if self.window[Int(offset)] == nil { self.windowCount += 1 }
            self.window[Int(offset)] = value
            return
        }
        if offset - UInt64(self.window.count) > UInt64(Self.slack) {
            // Far past the window (many other keys were given out in between): what it holds is old.
            self.moveWindowToStragglers()
            self.base = key
        } else {
            for _ in 0..<Int(offset - UInt64(self.window.count)) { self.window.append(nil) }
        }
        self.window.append(value)
        self.windowCount += 1
        // Entries kept while later ones came and went leave the window, oldest first.
        while self.window.count > 2 * self.windowCount + Self.slack {
            guard let oldest = self.window.removeFirst() else { preconditionFailure("window starts empty") }
            self.stragglers[self.base] = oldest
            self.base += 1
            self.windowCount -= 1
            self.dropLeadingEmptySlots()
        }
    }

    private mutating func dropLeadingEmptySlots() {
        if self.windowCount == 0 {
            self.window.removeAll(keepingCapacity: true)
            return
        }
        while case .some(.none) = self.window.first {
            self.window.removeFirst()
            self.base += 1
        }
    }

    private mutating func moveWindowToStragglers() {
        for (offset, slot) in self.window.slots.enumerated() {
            if let slot { self.stragglers[self.base + UInt64(offset)] = slot }
        }
        self.window.removeAll(keepingCapacity: true)
        self.windowCount = 0
    }
}

/// The slots of a ``RecentKeyTable``'s window: an array whose first `head` elements are no longer part of
/// it (removing from the front moves `head`; the array is shifted down once that dead prefix is as long as
/// the rest).
private struct RecentKeyWindow<Value> {
    private var storage: [Value?] = []
    private var head = 0

    var count: Int { self.storage.count - self.head }
    var first: Value?? { self.head < self.storage.count ? self.storage[self.head] : nil }
    var slots: ArraySlice<Value?> { self.storage[self.head...] }

    subscript(index: Int) -> Value? {
        get { self.storage[self.head + index] }
        set { self.storage[self.head + index] = newValue }
    }

    mutating func append(_ slot: Value?) {
        self.storage.append(slot)
    }

    @discardableResult
    mutating func removeFirst() -> Value? {
        let slot = self.storage[self.head]
        self.storage[self.head] = nil
        self.head += 1
        if self.head >= 32 && self.head * 2 >= self.storage.count {
            self.storage.removeFirst(self.head)
            self.head = 0
        }
        return slot
    }

    mutating func removeAll(keepingCapacity: Bool) {
        self.storage.removeAll(keepingCapacity: keepingCapacity)
        self.head = 0
    }
}
