internal import NIOCore

/// Decides when a recurring warning is logged: the first occurrence at once, then at most one line per
/// interval saying how many happened since. A flood (accept failing every few milliseconds, thousands of
/// connections refused) then costs one line every few seconds instead of one per event.
struct LogRateLimiter {
    let interval: TimeAmount
    private var lastLogged: NIODeadline?
    private var unlogged = 0

    init(interval: TimeAmount) {
        self.interval = interval
    }

    /// Records one occurrence at `now`; returns how many occurred since the last line (this one included)
    /// when a line is due, nil when it is not.
    mutating func record(now: NIODeadline = .now()) -> Int? {
        self.unlogged += 1
        if let lastLogged, now < lastLogged + self.interval { return nil }
        self.lastLogged = now
        defer { self.unlogged = 0 }
        return self.unlogged
    }
}
