internal import NIOCore
internal import Synchronization

/// Counts the bytes of a streamed request body as the connection pulls them, for its span.
final class ByteCounter: Sendable {
    private let count = Atomic<Int>(0)

    var total: Int { self.count.load(ordering: .relaxed) }

    /// `body`, counted here as it is read.
    func counting<Body: AsyncSequence & Sendable>(_ body: Body) -> CountedBody<Body> where Body.Element == ByteBuffer {
        CountedBody(base: body, counter: self)
    }

    fileprivate func add(_ bytes: Int) {
        self.count.add(bytes, ordering: .relaxed)
    }
}

/// A body sequence whose pieces a ``ByteCounter`` counts.
struct CountedBody<Base: AsyncSequence & Sendable>: AsyncSequence, Sendable where Base.Element == ByteBuffer {
    typealias Element = ByteBuffer
    let base: Base
    let counter: ByteCounter

    func makeAsyncIterator() -> Iterator {
        Iterator(base: self.base.makeAsyncIterator(), counter: self.counter)
    }

    struct Iterator: AsyncIteratorProtocol {
        var base: Base.AsyncIterator
        let counter: ByteCounter

        mutating func next() async throws -> ByteBuffer? {
            guard let piece = try await self.base.next(isolation: #isolation) else { return nil }
            self.counter.add(piece.readableBytes)
            return piece
        }
    }
}
