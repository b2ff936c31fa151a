import BLIP
import BLIPWire
import Dispatch
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// The send calls run on their caller's executor until they wait for the network (the package builds with
/// `NonisolatedNonsendingByDefault`): an actor that sends a request is not left for Swift's pool and then
/// re-entered, which costs two executor switches per call, and on an executor that is not the pool (NIO's
/// event loops installed as the global executor) a queued job each.
@Suite("Sending from an actor", .timeLimit(.minutes(1)))
struct CallerExecutorTests {
    @Test("queues the request on the actor's own executor, for every kind of send")
    func queuesOnTheCallersExecutor() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair()
        let client = WakeRecordingTransport(clientEnd)
        let server = BLIPConnection(transport: serverEnd, router: standardRouter())
        let caller = QueueBoundCaller()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await server.run() }
            try await withBLIPConnection(over: client) { connection in
                try await caller.sendEach(over: connection)
            }
            await server.close()
            try await group.waitForAll()
        }
        let wakes = client.wakes
        // One wake per send at least (the first frame of each); every one from inside the actor's queue.
        #expect(wakes.count >= 3)
        #expect(wakes.allSatisfy { $0 }, "wakes from the caller's queue: \(wakes)")
    }

    @Test("a send from an actor that is cancelled, or whose connection the peer closes, throws on the actor")
    func unhappyEndsOnTheCallersExecutor() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair()
        let (started, start) = AsyncStream.makeStream(of: Void.self)
        var router = BLIPRouter()
        router.register(profile: "never") { _, _ in
            start.yield()
            try await Task.sleep(for: .seconds(600))  // cancelled when the server closes
            return BLIPResponse()
        }
        let server = BLIPConnection(transport: serverEnd, router: router)
        let caller = QueueBoundCaller()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await server.run() }
            // The scope ends with the peer's close, which it reports.
            await #expect(throws: BLIPConnectionError.self) {
                try await withBLIPConnection(over: clientEnd) { connection in
                    await Self.cancelThenClose(connection, caller: caller, server: server, handlerStarts: started)
                }
            }
            try await group.waitForAll()
        }
    }

    /// A send cancelled once its request is in the peer's hands, then one ended by the peer's close.
    static func cancelThenClose(
        _ connection: BLIPConnection,
        caller: QueueBoundCaller,
        server: BLIPConnection,
        handlerStarts started: AsyncStream<Void>
    ) async {
        var handlerStarts = started.makeAsyncIterator()
        let cancelled = Task { await caller.sendUnanswered(over: connection) }
        _ = await handlerStarts.next(isolation: #isolation)
        cancelled.cancel()
        let (cancelError, cancelledOnQueue) = await cancelled.value
        #expect(cancelError is CancellationError, "\(String(describing: cancelError))")
        #expect(cancelledOnQueue)
        // Ended by the peer's close while it waits for its reply.
        let closed = Task { await caller.sendUnanswered(over: connection) }
        _ = await handlerStarts.next(isolation: #isolation)
        _ = await server.close()
        let (closeError, closedOnQueue) = await closed.value
        #expect(closeError is BLIPConnectionError, "\(String(describing: closeError))")
        #expect(closedOnQueue)
    }
}

/// A serial executor that runs its jobs on a Dispatch queue marked with a key, so that code can tell
/// whether it runs there.
final class MarkedQueueExecutor: SerialExecutor {
    static let mark = DispatchSpecificKey<Bool>()
    private let queue = DispatchQueue(label: "caller-executor-test")

    init() {
        self.queue.setSpecific(key: Self.mark, value: true)
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = self.asUnownedSerialExecutor()
        self.queue.async { job.runSynchronously(on: executor) }
    }

    static var isCurrent: Bool { DispatchQueue.getSpecific(key: Self.mark) == true }
}

actor QueueBoundCaller {
    private let executor = MarkedQueueExecutor()

    nonisolated var unownedExecutor: UnownedSerialExecutor { self.executor.asUnownedSerialExecutor() }

    func sendEach(over connection: BLIPConnection) async throws {
        precondition(MarkedQueueExecutor.isCurrent)
        let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "one"))
        #expect(String(buffer: reply.body) == "one")
        let streamed = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "echo", text: "two"))
        var body = ByteBuffer()
        for try await piece in streamed.body { body.writeImmutableBuffer(piece) }
        #expect(String(buffer: body) == "two")
        try await connection.sendNoReply(BLIPRequest(profile: "sink", text: "three"))
        #expect(MarkedQueueExecutor.isCurrent)
    }

    /// Sends a request that gets no reply; returns how it ended, and whether it ended on this actor's queue.
    func sendUnanswered(over connection: BLIPConnection) async -> (error: (any Error)?, onQueue: Bool) {
        do {
            _ = try await connection.sendRequest(BLIPRequest(profile: "never"))
            return (nil, MarkedQueueExecutor.isCurrent)
        } catch {
            return (error, MarkedQueueExecutor.isCurrent)
        }
    }
}

/// Forwards to an in-memory transport and records, for each wake, whether it came from the marked queue.
final class WakeRecordingTransport: BLIPTransport {
    private let base: BLIPInMemoryTransport
    private let recorded = NIOLockedValueBox<[Bool]>([])

    init(_ base: BLIPInMemoryTransport) {
        self.base = base
    }

    var wakes: [Bool] { self.recorded.withLockedValue { $0 } }
    var dialect: BLIPDialect { self.base.dialect }
    func start(_ sink: BLIPTransportSink) { self.base.start(sink) }
    func pauseReading() { self.base.pauseReading() }
    func resumeReading() { self.base.resumeReading() }
    func close(_ reason: BLIPCloseReason) { self.base.close(reason) }

    func wakeWriter() {
        let onCallerQueue = MarkedQueueExecutor.isCurrent
        self.recorded.withLockedValue { $0.append(onCallerQueue) }
        self.base.wakeWriter()
    }
}
