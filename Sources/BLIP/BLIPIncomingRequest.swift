internal import BLIPEngine
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

/// A request no handler took, delivered by ``BLIPConnection/incomingRequests``. It must be answered with
/// ``respond(_:)`` or ``respond(throwing:)``; one dropped unanswered is answered ERR BLIP/501 for you, so
/// that the peer never waits forever.
public final class BLIPIncomingRequest: Sendable {
    public let request: BLIPRequest
    /// False for no-reply requests, which must not be answered.
    public let expectsReply: Bool
    /// The request's number on the wire.
    public let number: UInt64
    let core: ConnectionCore
    /// What the request counts against the connection's buffer budget until it is answered or let go.
    private let charge: Int
    private let answered = Atomic<Bool>(false)
    private let released = Atomic<Bool>(false)

    init(core: ConnectionCore, request: BLIPRequest, number: UInt64, expectsReply: Bool, charge: Int) {
        self.core = core
        self.request = request
        self.number = number
        self.expectsReply = expectsReply
        self.charge = charge
    }

    deinit {
        if self.expectsReply && !self.answered.load(ordering: .acquiring) {
            self.core.respond(
                to: self.number,
                with: .failure(BLIPError(code: .handlerFailed, message: "request dropped without a reply")),
                releasing: self.takeCharge()
            )
        } else {
            self.core.releaseBuffered(self.takeCharge())
        }
    }

    /// Sends the reply. Throws if the request was answered already or expects no reply.
    public func respond(_ response: BLIPResponse) throws {
        try self.markAnswered()
        self.core.respond(to: self.number, with: .success(response), releasing: self.takeCharge())
    }

    /// Sends an ERR reply.
    public func respond(throwing error: BLIPError) throws {
        try self.markAnswered()
        self.core.respond(to: self.number, with: .failure(error), releasing: self.takeCharge())
    }

    private func markAnswered() throws {
        guard self.expectsReply else {
            throw BLIPConnectionError(.invalidMessage, "request #\(self.number) expects no reply")
        }
        guard !self.answered.exchange(true, ordering: .acquiringAndReleasing) else {
            throw BLIPConnectionError(.invalidMessage, "request #\(self.number) was already answered")
        }
    }

    /// The charge, the first time only.
    private func takeCharge() -> Int {
        self.released.exchange(true, ordering: .acquiringAndReleasing) ? 0 : self.charge
    }
}

/// The requests no handler took (with ``BLIPConnection/UnhandledRequestPolicy/deliver``). While they are
/// not taken, the connection buffers a few and then stops reading from the peer.
public struct BLIPIncomingRequests: AsyncSequence, Sendable {
    public typealias Element = BLIPIncomingRequest
    public typealias Failure = Never

    let core: ConnectionCore

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(core: self.core)
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let core: ConnectionCore

        public mutating func next() async -> BLIPIncomingRequest? {
            await self.core.nextUnhandledRequest()
        }
    }
}

extension ConnectionCore {
    func nextUnhandledRequest() async -> BLIPIncomingRequest? {
        await self.handOffThatCannotFail { (continuation: WaiterContinuation<BLIPIncomingRequest?, Never>) in
            var effects = Effects()
            self.state.withLockedValue { $0.waitForUnhandledRequest(continuation: continuation, effects: &effects) }
            self.perform(&effects)
        }
    }

    /// Takes the oldest request no handler took, if any, without waiting (``BLIPSteppedConnection``).
    func takeUnhandledRequest() -> BLIPIncomingRequest? {
        var effects = Effects()
        let request = self.state.withLockedValue { $0.popUnhandled(effects: &effects) }
        self.perform(&effects)
        return request
    }

    /// Bytes held for the peer were let go of outside any other operation.
    func releaseBuffered(_ bytes: Int) {
        guard bytes > 0 else { return }
        var effects = Effects()
        self.state.withLockedValue { state in state.release(bytes, effects: &effects) }
        self.perform(&effects)
    }
}
