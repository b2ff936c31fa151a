public import BLIP
internal import Synchronization

/// Holds a `slow` handler's answer until the test opens it. The handler polls rather than suspends, so that
/// it ends when its task is cancelled (the connection closed) and at most 20 s after it started.
public final class Release: Sendable {
    private let flag = Atomic<Bool>(false)

    public init() {}

    public func open() { self.flag.store(true, ordering: .releasing) }

    public var isOpen: Bool { self.flag.load(ordering: .acquiring) }
}

extension BLIPRouter {
    /// Registers `slow`, which answers "late" once `release` opens.
    public mutating func registerSlow(until release: Release) {
        self.register(profile: "slow") { _, _ in
            for _ in 0..<4_000 where !release.isOpen { try await Task.sleep(for: .milliseconds(5)) }
            return BLIPResponse(text: "late")
        }
    }
}
