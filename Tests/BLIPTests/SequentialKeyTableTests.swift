import BLIPEngine
import Testing

@testable import BLIP

/// The table of reply waiters and tokens behaves as a dictionary whatever order entries leave in, through growth and
/// runs of entries that wrap around the end of its slots.
@Suite("Sequential-key table")
struct SequentialKeyTableTests {
    struct Generator: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            self.state = self.state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return self.state
        }
        mutating func next(_ bound: Int) -> Int { Int((self.next() >> 33) % UInt64(bound)) }
    }

    @Test("random traffic: every answer equals a dictionary's", arguments: 0..<8)
    func matchesDictionary(seed: Int) {
        var random = Generator(state: UInt64(seed) &+ 7)
        var table = SequentialKeyTable<Int>()
        var model: [UInt64: Int] = [:]
        var nextKey: UInt64 = 1
        for step in 0..<5_000 {
            switch random.next(10) {
            case 0..<5:
                // Mostly the next id; sometimes after a gap (messages that need no waiter), rarely a long one
                // (which lands on slots of older entries: collisions).
                nextKey += UInt64(random.next(10) == 0 ? random.next(100) : random.next(2))
                table[BLIPOutgoingID(rawValue: nextKey)] = step
                model[nextKey] = step
                nextKey += 1
            case 5..<9:
                // Mostly among the oldest entries, sometimes any, sometimes one not there.
                guard !model.isEmpty else { continue }
                let keys = model.keys.sorted()
                let key =
                    random.next(8) == 0
                    ? nextKey + UInt64(random.next(5)) : keys[random.next(3) == 0 ? random.next(keys.count) : 0]
                #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: key)) == model.removeValue(forKey: key))
            default:
                if let key = model.keys.randomElement(using: &random) {
                    #expect(table[BLIPOutgoingID(rawValue: key)] == model[key])
                    table[BLIPOutgoingID(rawValue: key)] = -step  // replaced in place
                    model[key] = -step
                }
                #expect(table[BLIPOutgoingID(rawValue: nextKey + 3)] == nil)
            }
            #expect(table.count == model.count && table.isEmpty == model.isEmpty)
        }
        #expect(table.values.sorted() == model.values.sorted())
        for (key, value) in model { #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: key)) == value) }
        #expect(table.isEmpty && table.values.isEmpty)
    }

    @Test("entries whose slots collide, removed in every order, leave the others findable")
    func collidingEntries() {
        // With 16 slots, ids 16 apart share a slot: all but the first go to the dictionary.
        let keys: [UInt64] = [15, 31, 47, 1, 17, 2]
        let orders: [[UInt64]] = [keys, Array(keys.reversed()), [31, 1, 15, 2, 47, 17]]
        for removalOrder in orders {
            var table = SequentialKeyTable<UInt64>()
            for key in keys { table[BLIPOutgoingID(rawValue: key)] = key }
            var left = Set(keys)
            for key in removalOrder {
                #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: key)) == key)
                left.remove(key)
                for other in left { #expect(table[BLIPOutgoingID(rawValue: other)] == other, "after \(key)") }
                #expect(table.count == left.count)
            }
        }
    }

    @Test("an entry sent to the dictionary, replaced after its slot was freed, stays one entry")
    func replacedDisplacedEntry() {
        var table = SequentialKeyTable<Int>()
        table[BLIPOutgoingID(rawValue: 3)] = 3
        table[BLIPOutgoingID(rawValue: 19)] = 19  // the slot of 3
        #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: 3)) == 3)
        table[BLIPOutgoingID(rawValue: 19)] = -19
        #expect(table.count == 1 && table.values == [-19])
        #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: 19)) == -19)
        #expect(table.isEmpty && table[BLIPOutgoingID(rawValue: 19)] == nil)
    }
}

extension SequentialKeyTableTests {
    @Test("tokens: keyed by plain numbers, the same table as by ids")
    func numberKeys() {
        var table = SequentialKeyTable<String>()
        for token in UInt64(1)...40 { table[token] = "t\(token)" }
        #expect(table.count == 40)
        #expect(table[7] == "t7")
        #expect(table[BLIPOutgoingID(rawValue: 7)] == "t7")
        #expect(table.removeValue(forKey: UInt64(7)) == "t7")
        #expect(table[7] == nil)
        #expect(table.removeValue(forKey: UInt64(7)) == nil)
        table[9] = nil
        #expect(table[9] == nil && table.count == 38)
        #expect(table.removeValue(forKey: BLIPOutgoingID(rawValue: 40)) == "t40")
        #expect(Set(table.values) == Set((UInt64(1)...39).filter { $0 != 7 && $0 != 9 }.map { "t\($0)" }))
    }
}
