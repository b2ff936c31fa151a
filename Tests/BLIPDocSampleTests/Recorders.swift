import BLIP
import NIOConcurrencyHelpers

/// Counts calls across tasks.
actor Counter {
    private(set) var count = 0

    func next() -> Int {
        self.count += 1
        return self.count
    }
}

/// What a sample's stand-in functions (`use`, `markPushed`, `consume`) were given.
final class Outcome: Sendable {
    private let state = NIOLockedValueBox<(value: String?, all: [String], total: Int)>((nil, [], 0))

    func set(_ value: String) { self.state.withLockedValue { $0.value = value } }
    func append(_ value: String) { self.state.withLockedValue { $0.all.append(value) } }
    func add(_ count: Int) { self.state.withLockedValue { $0.total += count } }

    var value: String? { self.state.withLockedValue { $0.value } }
    var all: [String] { self.state.withLockedValue { $0.all } }
    var total: Int { self.state.withLockedValue { $0.total } }
}

/// The Streaming article's progress `meter`: keeps the last figures reported.
final class Meter: Sendable {
    private let state = NIOLockedValueBox<(sent: Int, received: Int)>((0, 0))

    func update(sent: Int, received: Int) { self.state.withLockedValue { $0 = (sent, received) } }
    var last: (Int, Int) { self.state.withLockedValue { ($0.sent, $0.received) } }
}

/// Body pieces given up front, as an `AsyncSequence`.
struct Pieces: AsyncSequence, Sendable {
    let pieces: [ByteBuffer]

    struct AsyncIterator: AsyncIteratorProtocol {
        var rest: ArraySlice<ByteBuffer>

        mutating func next() async -> ByteBuffer? { self.rest.popFirst() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(rest: self.pieces[...]) }
}
