public import Logging

/// Runs a BLIP connection over `transport` for the duration of `body`, then closes it normally. Handlers
/// registered in `router` answer the peer's requests meanwhile.
///
/// `body` runs on the caller's actor (`isolation`), so an actor can use its own state inside. The session
/// is scoped to the connection too: if the connection ends first, `body` is cancelled. If the peer closed
/// it, the network failed or the peer broke the protocol, the call then throws the ``BLIPConnectionError``
/// that pending requests failed with, carrying the ``BLIPConnectionError/closeStatus``; if the application
/// closed it (``BLIPConnection/close(code:reason:)`` from the body, a handler or another task), what the
/// body returns or throws stands.
public func withBLIPConnection<Result: Sendable>(
    over transport: some BLIPTransport,
    configuration: BLIPConnection.Configuration = BLIPConnection.Configuration(),
    router: BLIPRouter = BLIPRouter(),
    logger: Logger = Logger(label: "blip"),
    identity: (any Sendable)? = nil,
    isolation: isolated (any Actor)? = #isolation,
    _ body: (BLIPConnection) async throws -> Result
) async throws -> Result {
    let connection = BLIPConnection(
        transport: transport,
        configuration: configuration,
        router: router,
        logger: logger,
        identity: identity
    )
    return try await connection.runScoped(isolation: isolation, body)
}

extension BLIPConnection {
    /// Runs the connection and `body` side by side: the first to end ends the other (see
    /// ``withBLIPConnection(over:configuration:router:logger:identity:isolation:_:)``).
    package func runScoped<Result: Sendable>(
        isolation: isolated (any Actor)?,
        _ body: (BLIPConnection) async throws -> Result
    ) async throws -> Result {
        try await withoutActuallyEscaping(body) { body in
            // The body runs in a child task so that the connection's end can cancel it without cancelling
            // the caller; the child runs it on `isolation`, as the caller would have.
            let body = ScopedBody(body)
            let outcome = await withTaskGroup(of: ScopedOutcome<Result>.self) { group in
                group.addTask { .closed(await self.run()) }
                group.addTask { .body(await Self.runBody(body, with: self, on: isolation)) }
                var result: Swift.Result<Result, any Error>?
                var closedFirst = false
                while let outcome = await group.next() {
                    switch outcome {
                    case .closed:
                        if result == nil {
                            closedFirst = true
                            group.cancelAll()
                        }
                    case .body(let outcome):
                        result = outcome
                        guard !closedFirst else { break }
                        // Already closed (by the peer, say) while its run task has yet to report it: the
                        // connection still ended first, whichever child a busy machine finishes first.
                        if self.isClosed {
                            closedFirst = true
                        } else {
                            await self.close()
                        }
                    }
                }
                return (result!, closedFirst)
            }
            switch outcome {
            case (.success(let value), false):
                return value
            case (.failure(let error), false):
                throw error
            case (.success(let value), true) where self.core.closedAsRequested:
                return value  // the application closed it (from the body, a handler or outside), and the body agrees
            case (_, true):
                throw self.core.closeError ?? CancellationError()
            }
        }
    }

    private static func runBody<Result: Sendable>(
        _ body: ScopedBody<Result>,
        with connection: BLIPConnection,
        on isolation: isolated (any Actor)?
    ) async -> Swift.Result<Result, any Error> {
        do {
            return .success(try await body.call(connection))
        } catch {
            return .failure(error)
        }
    }
}

private enum ScopedOutcome<Result: Sendable>: Sendable {
    case closed(BLIPCloseStatus)
    case body(Swift.Result<Result, any Error>)
}

/// The caller's closure, carried into the child task that runs it on the caller's own isolation (and only
/// there, while the caller waits): that is what makes the unchecked conformance sound.
private struct ScopedBody<Result: Sendable>: @unchecked Sendable {
    let call: (BLIPConnection) async throws -> Result

    init(_ call: @escaping (BLIPConnection) async throws -> Result) {
        self.call = call
    }
}
