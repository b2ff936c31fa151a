internal import BLIPEngine

/// A map keyed by numbers given out one after another: our messages' ids (to what waits on them) and
/// callers' tokens (to their messages). A slot per key's low bits, and a dictionary for a key whose slot
/// another one holds.
///
/// The entries in flight are nearly always recent ones, so each finds its own slot with no hashing and no
/// probing; a long-lived entry (a continuous `subChanges`) only sends the key that comes round to its slot
/// to the dictionary. A `Dictionary` hashed the key on insertion, look-up and removal, and rehashed
/// neighbours on removal: about 1 000 instructions per request on a client for the reply waiters alone.
/// (Linear probing was tried: the keys in flight form one run of slots, which every removal scanned to its
/// end.) There are always at least twice as many slots as entries. Keys start at 1.
struct SequentialKeyTable<Value> {
    private struct Slot {
        /// 0 for an empty slot: keys start at 1.
        var key: UInt64
        var value: Value?
    }

    private var slots: [Slot] = []
    private var displaced: [UInt64: Value] = [:]
    private(set) var count = 0

    var isEmpty: Bool { self.count == 0 }

    /// Every value, in no particular order.
    var values: [Value] { self.slots.compactMap(\.value) + self.displaced.values }

    subscript(key: UInt64) -> Value? {
        get {
            guard self.count > 0 else { return nil }
            let slot = self.slots[self.home(of: key)]
            if slot.key == key { return slot.value }
            return self.displaced.isEmpty ? nil : self.displaced[key]
        }
        set {
            if let newValue {
                self.insert(newValue, for: key)
            } else {
                self.removeValue(forKey: key)
            }
        }
    }

    subscript(id: BLIPOutgoingID) -> Value? {
        get { self[id.rawValue] }
        set { self[id.rawValue] = newValue }
    }

    @discardableResult
    mutating func removeValue(forKey key: UInt64) -> Value? {
        guard self.count > 0 else { return nil }
        let index = self.home(of: key)
        if self.slots[index].key == key {
            let value = self.slots[index].value
            self.slots[index] = Slot(key: 0, value: nil)
            self.count -= 1
            return value
        }
        guard !self.displaced.isEmpty, let value = self.displaced.removeValue(forKey: key) else { return nil }
        self.count -= 1
        return value
    }

    @discardableResult
    mutating func removeValue(forKey id: BLIPOutgoingID) -> Value? {
        self.removeValue(forKey: id.rawValue)
    }

    mutating func removeAll() {
        self.slots = []
        self.displaced = [:]
        self.count = 0
    }

    private func home(of key: UInt64) -> Int {
        Int(truncatingIfNeeded: key) & (self.slots.count - 1)
    }

    private mutating func insert(_ value: Value, for key: UInt64) {
        precondition(key != 0, "keys start at 1")
        // Replaced where it is: one in the dictionary must not gain a second copy in its slot, freed since.
        if !self.displaced.isEmpty, self.displaced[key] != nil {
            self.displaced[key] = value
            return
        }
        if (self.count + 1) * 2 > self.slots.count { self.grow() }
        let index = self.home(of: key)
        switch self.slots[index].key {
        case 0:
            self.slots[index] = Slot(key: key, value: value)
            self.count += 1
        case key:
            self.slots[index].value = value
        default:
            self.displaced[key] = value
            self.count += 1
        }
    }

    private mutating func grow() {
        let old = self.slots
        let oldDisplaced = self.displaced
        self.slots = Array(repeating: Slot(key: 0, value: nil), count: Swift.max(16, old.count * 2))
        self.displaced = [:]
        self.count = 0
        for slot in old where slot.key != 0 { self.insert(slot.value!, for: slot.key) }
        for (key, value) in oldDisplaced { self.insert(value, for: key) }
    }
}
