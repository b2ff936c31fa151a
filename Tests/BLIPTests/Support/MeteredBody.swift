import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// Counts what a ``MeteredBody`` produced and whether its iterators are still alive, so that a test can
/// see how far ahead of the reader a body was pulled, and that pulling stopped and let go.
final class BodyMeter: Sendable {
    private struct Counts {
        var produced = 0
        var iteratorsMade = 0
        var iteratorsAlive = 0
        var failures = 0
    }

    private let counts = NIOLockedValueBox(Counts())

    var produced: Int { self.counts.withLockedValue { $0.produced } }
    var iteratorsMade: Int { self.counts.withLockedValue { $0.iteratorsMade } }
    var iteratorsAlive: Int { self.counts.withLockedValue { $0.iteratorsAlive } }
    var failures: Int { self.counts.withLockedValue { $0.failures } }

    fileprivate func made() { self.counts.withLockedValue { $0.iteratorsMade += 1 } }
    fileprivate func alive(_ delta: Int) { self.counts.withLockedValue { $0.iteratorsAlive += delta } }
    fileprivate func produced(_ bytes: Int) { self.counts.withLockedValue { $0.produced += bytes } }
    fileprivate func failed() { self.counts.withLockedValue { $0.failures += 1 } }
}

struct ReplyBodyFailure: Error, Equatable {}

/// A reply body of `total` bytes in `chunk`-byte pieces, each made only when asked for. It can throw
/// after `failsAfter` pieces, or wait (until its task is cancelled) after `stallsAfter` pieces.
struct MeteredBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let total: Int
    let chunk: Int
    var failsAfter: Int?
    var stallsAfter: Int?
    let meter: BodyMeter

    init(total: Int, chunk: Int, failsAfter: Int? = nil, stallsAfter: Int? = nil, meter: BodyMeter) {
        self.total = total
        self.chunk = chunk
        self.failsAfter = failsAfter
        self.stallsAfter = stallsAfter
        self.meter = meter
    }

    /// The byte at `offset`: the same across a piece, different from one piece to the next.
    static func byte(at offset: Int, chunk: Int) -> UInt8 {
        UInt8(truncatingIfNeeded: (offset / chunk) &* 7 &+ 1)
    }

    /// The whole body, to compare with what arrived.
    static func expected(total: Int, chunk: Int) -> ByteBuffer {
        var buffer = ByteBuffer()
        var offset = 0
        while offset < total {
            let size = Swift.min(chunk, total - offset)
            buffer.writeRepeatingByte(Self.byte(at: offset, chunk: chunk), count: size)
            offset += size
        }
        return buffer
    }

    /// Whether `piece`, found at `offset` of the body, starts and ends with the right bytes (cheap enough
    /// for large bodies in a debug build).
    static func matches(_ piece: ByteBuffer, at offset: Int, chunk: Int) -> Bool {
        guard let first = piece.readableBytesView.first, let last = piece.readableBytesView.last else { return true }
        return first == Self.byte(at: offset, chunk: chunk)
            && last == Self.byte(at: offset + piece.readableBytes - 1, chunk: chunk)
    }

    func makeAsyncIterator() -> Iterator {
        self.meter.made()
        return Iterator(body: self, lifetime: Lifetime(meter: self.meter))
    }

    /// Counts the iterator alive from its making until its last copy goes.
    final class Lifetime: Sendable {
        let meter: BodyMeter

        init(meter: BodyMeter) {
            self.meter = meter
            meter.alive(1)
        }

        deinit { self.meter.alive(-1) }
    }

    struct Iterator: AsyncIteratorProtocol {
        let body: MeteredBody
        let lifetime: Lifetime
        var offset = 0
        var pieces = 0

        mutating func next() async throws -> ByteBuffer? {
            if self.pieces == self.body.failsAfter {
                self.body.meter.failed()
                throw ReplyBodyFailure()
            }
            if self.pieces == self.body.stallsAfter {
                try await Task.sleep(for: .seconds(600))  // until the connection's end cancels it
            }
            guard self.offset < self.body.total else { return nil }
            let size = Swift.min(self.body.chunk, self.body.total - self.offset)
            let piece = ByteBuffer(
                repeating: MeteredBody.byte(at: self.offset, chunk: self.body.chunk),
                count: size
            )
            self.offset += size
            self.pieces += 1
            self.body.meter.produced(size)
            return piece
        }
    }
}
