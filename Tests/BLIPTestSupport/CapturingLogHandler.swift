public import Logging
internal import NIOConcurrencyHelpers

/// A log handler that keeps what is logged, and can run a hook for each entry (a hook that takes the
/// connection's lock finds any log call made while the lock is held: it crashes or hangs there).
public struct CapturingLogHandler: LogHandler {
    public struct Entry: Sendable {
        public var level: Logger.Level
        public var message: String
        public var metadata: Logger.Metadata
    }

    public final class Store: Sendable {
        private let entryBox = NIOLockedValueBox<[Entry]>([])
        private let hookBox = NIOLockedValueBox<(@Sendable () -> Void)?>(nil)

        public init() {}

        /// Everything logged so far.
        public var entries: [Entry] { self.entryBox.withLockedValue { $0 } }

        /// Runs `hook` for every entry from now on (nil: none).
        public func setHook(_ hook: (@Sendable () -> Void)?) { self.hookBox.withLockedValue { $0 = hook } }

        func append(_ entry: Entry) {
            self.entryBox.withLockedValue { $0.append(entry) }
            self.hookBox.withLockedValue { $0 }?()
        }

        public func logger(level: Logger.Level = .trace) -> Logger {
            var logger = Logger(label: "test") { _ in CapturingLogHandler(store: self) }
            logger.logLevel = level
            return logger
        }

        public func messages(atLeast level: Logger.Level) -> [String] {
            self.entryBox.withLockedValue { $0.filter { $0.level >= level }.map(\.message) }
        }
    }

    let store: Store
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .trace

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.metadata[key] }
        set { self.metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        self.store.append(
            Entry(
                level: event.level,
                message: "\(event.message)",
                metadata: self.metadata.merging(event.metadata ?? [:]) { $1 }
            )
        )
    }
}
