/// Lets at most `limit` callers into a section at once; the others wait their turn, first come first
/// served. Parameterized tests run every case at once: one that opens sockets per case uses this to stay
/// well under a process limit of 1024 descriptors.
actor ConcurrencyLimit {
    private let limit: Int
    private var inside = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(_ limit: Int) {
        self.limit = limit
    }

    func run<T: Sendable>(_ body: @Sendable () async throws -> T) async rethrows -> T {
        await self.enter()
        defer { self.leave() }
        return try await body()
    }

    private func enter() async {
        guard self.inside >= self.limit else {
            self.inside += 1
            return
        }
        // The place is handed over by `leave()`, which counts it.
        await withCheckedContinuation { self.waiting.append($0) }
    }

    private func leave() {
        if self.waiting.isEmpty {
            self.inside -= 1
        } else {
            self.waiting.removeFirst().resume()
        }
    }
}
