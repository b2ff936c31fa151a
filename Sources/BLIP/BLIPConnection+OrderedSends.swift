internal import DequeModule

extension BLIPConnection {
    /// Queues a request now, in call order, and returns at once; await ``BLIPQueuedRequest/reply()`` later.
    ///
    /// Requests queued one after the other from one task get request numbers in that order, so a peer whose
    /// handlers run in ``BLIPRouter/HandlerOrder/serial`` order handles them in that order. Calling
    /// ``sendRequest(_:timeout:progress:)`` from several child tasks gives no such order: the tasks start in
    /// any order. To keep many requests in flight in order, queue them here and await the replies in turn
    /// (or use ``sendRequests(_:maximumInFlight:timeout:)``).
    ///
    /// - Parameters:
    ///   - request: The request; its `Profile` property says what it is for.
    ///   - timeout: How long to wait for the reply, counted from now (nil:
    ///     ``Configuration/requestTimeout``). Past it the request is given up and
    ///     ``BLIPQueuedRequest/reply()`` throws ``BLIPConnectionError/Code/timedOut``.
    ///   - progress: Told where the request is as it goes, up to a final report.
    /// - Returns: The queued request. Dropping it does not cancel the request; its reply is then dropped.
    public func enqueueRequest(
        _ request: BLIPRequest,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil
    ) -> BLIPQueuedRequest {
        let outcome = ReplyOutcome()
        let pending = self.sendRequest(request, timeout: timeout, progress: progress) { outcome.end($0) }
        return BLIPQueuedRequest(outcome: outcome, pending: pending)
    }

    /// Sends `requests` in their order, keeping up to `maximumInFlight` of them waiting for a reply, and
    /// yields each one's outcome in the same order.
    ///
    /// The next requests are queued as outcomes are taken, so a consumer that lags holds the sending back.
    /// Ending the iteration early cancels the requests still in flight. Cancelling its task sends no more
    /// requests and cancels those in flight; their outcomes (mostly `CancellationError`) are still yielded,
    /// so that every request sent has exactly one.
    ///
    /// - Parameters:
    ///   - requests: The requests, read lazily.
    ///   - maximumInFlight: Requests waiting for a reply at most (at least 1).
    ///   - timeout: Each request's timeout, counted from when it is queued.
    public func sendRequests<Requests: Sequence>(
        _ requests: Requests,
        maximumInFlight: Int = 64,
        timeout: Duration? = nil
    ) -> BLIPOrderedReplies<Requests> where Requests.Element == BLIPRequest {
        precondition(maximumInFlight >= 1, "maximumInFlight must be at least 1")
        return BLIPOrderedReplies(
            connection: self,
            requests: requests,
            maximumInFlight: maximumInFlight,
            timeout: timeout
        )
    }
}

/// The outcomes of ``BLIPConnection/sendRequests(_:maximumInFlight:timeout:)``, in request order: each a
/// reply, or what the request failed with (a ``BLIPError`` for an ERR reply, a ``BLIPConnectionError``).
/// One request's failure does not end the sequence; it ends after the last request's outcome.
public struct BLIPOrderedReplies<Requests: Sequence>: AsyncSequence where Requests.Element == BLIPRequest {
    public typealias Element = Result<BLIPResponse, any Error>
    public typealias Failure = Never

    let connection: BLIPConnection
    let requests: Requests
    let maximumInFlight: Int
    let timeout: Duration?

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(
            connection: self.connection,
            requests: self.requests.makeIterator(),
            maximumInFlight: self.maximumInFlight,
            timeout: self.timeout
        )
    }

    public struct AsyncIterator: AsyncIteratorProtocol {
        let connection: BLIPConnection
        var requests: Requests.Iterator
        let maximumInFlight: Int
        let timeout: Duration?
        private var inFlight = InFlight()
        private var exhausted = false

        /// The requests waiting for a reply; they are cancelled when the iteration ends early.
        private final class InFlight {
            var queue: Deque<BLIPQueuedRequest> = []
            deinit { for request in self.queue { request.cancel() } }
        }

        init(connection: BLIPConnection, requests: Requests.Iterator, maximumInFlight: Int, timeout: Duration?) {
            self.connection = connection
            self.requests = requests
            self.maximumInFlight = maximumInFlight
            self.timeout = timeout
        }

        public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async -> Element? {
            if Task.isCancelled && !self.exhausted {
                self.exhausted = true
                for request in self.inFlight.queue { request.cancel() }
            }
            while !self.exhausted && self.inFlight.queue.count < self.maximumInFlight {
                guard let request = self.requests.next() else {
                    self.exhausted = true
                    break
                }
                self.inFlight.queue.append(self.connection.enqueueRequest(request, timeout: self.timeout))
            }
            guard let first = self.inFlight.queue.popFirst() else { return nil }
            do {
                return .success(try await first.reply())
            } catch {
                return .failure(error)
            }
        }

        public mutating func next() async -> Element? {
            await self.next(isolation: nil)
        }
    }
}
