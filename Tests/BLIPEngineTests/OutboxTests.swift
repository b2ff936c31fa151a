import BLIPEngine
import Testing

final class Entry: BLIPOutboxEntry, CustomStringConvertible {
    let name: String
    let isUrgent: Bool
    var hasStarted: Bool

    init(_ token: String) {
        self.name = String(token.prefix { $0 != "*" })
        self.isUrgent = token.hasPrefix("u")
        self.hasStarted = token.hasSuffix("*")
    }

    var description: String { self.name }
}

struct OutboxVector: Sendable, CustomTestStringConvertible {
    var name: String
    var start: [String]
    var insert: String
    var isNew: Bool
    var liteCore: [String]
    var testDescription: String { self.name }

    static let all: [OutboxVector] = {
        let json = try! Fixtures.json("scheduler/outbox-insertion.json")
        return (json["cases"] as! [[String: Any]]).map {
            OutboxVector(
                name: $0["name"] as! String,
                start: $0["start"] as! [String],
                insert: $0["insert"] as! String,
                isNew: $0["new"] as! Bool,
                liteCore: $0["litecore"] as! [String]
            )
        }
    }()
}

@Suite("Out-box")
struct OutboxTests {
    @Test("urgent insertion gives LiteCore's order (digest 10.8)", arguments: OutboxVector.all)
    func insertion(_ vector: OutboxVector) {
        var outbox = BLIPOutbox<Entry>()
        for token in vector.start { outbox.push(Entry(token), isNew: false) }
        #expect(outbox.entries.map(\.name) == vector.start.map { String($0.prefix { $0 != "*" }) })
        outbox.push(Entry(vector.insert), isNew: vector.isNew)
        #expect(outbox.entries.map(\.name) == vector.liteCore)
    }

    @Test("normal messages go to the tail: round robin")
    func roundRobin() throws {
        var outbox = BLIPOutbox<Entry>()
        for token in ["n1", "n2", "n3"] { outbox.push(Entry(token), isNew: true) }
        let popped = outbox.popFirst()
        let head = try #require(popped)
        outbox.push(head, isNew: false)
        #expect(outbox.entries.map(\.name) == ["n2", "n3", "n1"])
        let poppedNext = outbox.popFirst()
        let next = try #require(poppedNext)
        outbox.push(next, isNew: false)
        #expect(outbox.entries.map(\.name) == ["n3", "n1", "n2"])
    }
}
