import Logging
import NIOConcurrencyHelpers
import Synchronization

/// A log handler that keeps what is logged, and can run a hook for each entry (a hook that takes the
/// connection's lock finds any log call made while the lock is held: it crashes or hangs there).
struct CapturingLogHandler: LogHandler {
    struct Entry: Sendable {
        var level: Logger.Level
        var message: String
        var metadata: Logger.Metadata
    }

    final class Store: Sendable {
        let entries = NIOLockedValueBox<[Entry]>([])
        let hook = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)

        func logger(level: Logger.Level = .trace) -> Logger {
            var logger = Logger(label: "test") { _ in CapturingLogHandler(store: self) }
            logger.logLevel = level
            return logger
        }

        func messages(atLeast level: Logger.Level) -> [String] {
            self.entries.withLockedValue { $0.filter { $0.level >= level }.map(\.message) }
        }
    }

    let store: Store
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let entry = Entry(
            level: event.level,
            message: "\(event.message)",
            metadata: self.metadata.merging(event.metadata ?? [:]) { $1 }
        )
        self.store.entries.withLockedValue { $0.append(entry) }
        self.store.hook.withLockedValue { $0 }?()
    }
}
