public import Testing

/// Checks `condition` every 10 ms for up to 20 s; records an issue if it never holds. A bound that catches a
/// hang, not a timing expectation.
public func eventually(
    _ condition: () async throws -> Bool,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    let deadline = ContinuousClock.now + .seconds(20)
    while try await !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("condition not met within 20 s", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(10))
    }
}

/// Repeats `operation` (every 10 ms for up to 20 s, as ``eventually(_:sourceLocation:)``) until it throws an `E`,
/// and returns that error: nil, with an issue recorded, if it never does. Other errors are rethrown.
public func eventuallyThrown<E: Error>(
    _ type: E.Type,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ operation: () async throws -> Void
) async throws -> E? {
    var thrown: E?
    try await eventually(
        {
            do {
                try await operation()
                return false
            } catch let error as E {
                thrown = error
                return true
            }
        },
        sourceLocation: sourceLocation
    )
    return thrown
}
