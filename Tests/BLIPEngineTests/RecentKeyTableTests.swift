import Testing

@testable import BLIPEngine

/// The table of messages being sent behaves as a dictionary, and its window stays bounded by its entries
/// whatever order they leave in.
@Suite("Recent-key table")
struct RecentKeyTableTests {
    final class Entry: Equatable, Sendable {
        let value: Int
        init(_ value: Int) { self.value = value }
        static func == (lhs: Entry, rhs: Entry) -> Bool { lhs.value == rhs.value }
    }

    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            self.state = self.state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return self.state
        }
        mutating func next(_ bound: Int) -> Int {
            self.state = self.state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((self.state >> 33) % UInt64(bound))
        }
    }

    @Test(
        "random traffic: every answer (searches too) equals a dictionary's; after each insertion the window is in bounds",
        arguments: 0..<10
    )
    func matchesDictionary(seed: Int) {
        var random = Generator(state: UInt64(seed) &+ 99)
        var table = RecentKeyTable<Entry>()
        var model: [UInt64: Int] = [:]
        var nextKey = UInt64(random.next(1000))
        for step in 0..<5000 {
            switch random.next(10) {
            case 0..<5:
                // Mostly the next key; sometimes after a gap (other messages in between), rarely a long one.
                nextKey += UInt64(random.next(10) == 0 ? random.next(300) : random.next(3)) + 1
                table[nextKey] = Entry(step)
                model[nextKey] = step
                #expect(table.windowSlots <= 2 * table.count + RecentKeyTable<Entry>.slack, "step \(step)")
            case 5:
                // Out of order: a key at or before the recent ones, not in use.
                let key = nextKey &- UInt64(random.next(200))
                guard key <= nextKey, model[key] == nil else { continue }
                table[key] = Entry(step)
                model[key] = step
            case 9 where random.next(2) == 0:
                // An entry updated in place (a request's state changing), wherever it now sits.
                guard let key = model.keys.randomElement(using: &random) else { continue }
                table[key] = Entry(step)
                model[key] = step
            case 6..<9:
                // Mostly among the oldest entries, sometimes any.
                guard !model.isEmpty else { continue }
                let keys = model.keys.sorted()
                let index = random.next(3) == 0 ? random.next(keys.count) : random.next(min(4, keys.count))
                #expect(table.removeValue(forKey: keys[index])?.value == model.removeValue(forKey: keys[index]))
            default:
                #expect(table.removeValue(forKey: nextKey &+ 1 &+ UInt64(random.next(50))) == nil)
                let read = nextKey &- UInt64(random.next(400))
                #expect(table[read]?.value == model[read])
                if let (key, value) = model.randomElement(using: &random) {
                    #expect(table.firstKey(where: { $0.value == value }) == key)
                }
                #expect(table.firstKey(where: { $0.value < 0 }) == nil)
            }
            #expect(table.count == model.count)
        }
        #expect(table.values.map(\.value).sorted() == model.values.sorted())
        for (key, value) in model {
            #expect(table[key]?.value == value)
            #expect(table.removeValue(forKey: key)?.value == value)
        }
        #expect(table.isEmpty && table.windowSlots == 0)
    }

    @Test("entries that stay while 30 000 later ones come and go keep the window small, and are found")
    func longLivedEntries() {
        var table = RecentKeyTable<Entry>()
        table[1] = Entry(1)
        var kept: [UInt64] = []
        var maximumSlots = 0
        for key in UInt64(2)...30_001 {
            table[key] = Entry(Int(key))
            maximumSlots = max(maximumSlots, table.windowSlots)
            // Every 1 000th stays to the end; the others leave two keys later.
            if key % 1000 == 0 { kept.append(key) }
            let leaving = key - 2
            if leaving > 1, leaving % 1000 != 0 {
                #expect(table.removeValue(forKey: leaving)?.value == Int(leaving))
            }
        }
        #expect(maximumSlots <= 2 * (kept.count + 3) + RecentKeyTable<Entry>.slack)
        #expect(table.removeValue(forKey: 1)?.value == 1)
        for key in kept { #expect(table.removeValue(forKey: key)?.value == Int(key)) }
        #expect(table.count == 1)  // the last key (the one before it was kept, and is removed)
        table.removeAll()
        #expect(table.isEmpty && table.windowSlots == 0)
    }

    /// Regression: with the window empty, updating an entry that had left it restarted the window at its
    /// key and put a second copy there; the count stayed one too high after its removal (a graceful close
    /// that waits for the count to reach zero waited for its whole timeout).
    @Test("an entry that left the window, updated while the window is empty, is still one entry")
    func updatedStraggler() {
        var table = RecentKeyTable<Entry>()
        table[1] = Entry(1)
        for key in UInt64(2)...300 {
            table[key] = Entry(Int(key))
            #expect(table.removeValue(forKey: key)?.value == Int(key))
        }
        #expect(table.count == 1 && table.windowSlots == 0)  // 1 is a straggler, the window is empty
        table[1] = Entry(-1)
        #expect(table.count == 1)
        #expect(table[1]?.value == -1)
        #expect(table.removeValue(forKey: 1)?.value == -1)
        #expect(table.isEmpty && table[1] == nil)
    }

    @Test("keys far apart: older entries move out of the window instead of padding it")
    func farApartKeys() {
        var table = RecentKeyTable<Entry>()
        table[10] = Entry(10)
        table[1_000_000_000] = Entry(1)
        #expect(table.windowSlots == 1)
        #expect(table[10]?.value == 10)
        table[5] = Entry(5)  // before both
        #expect(table.count == 3)
        #expect(table.removeValue(forKey: 10)?.value == 10)
        #expect(table.removeValue(forKey: 5)?.value == 5)
        #expect(table.removeValue(forKey: 1_000_000_000)?.value == 1)
        #expect(table.isEmpty)
    }
}
