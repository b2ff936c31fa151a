#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// How much the peers of all a server's connections together may make it hold
/// (``BLIPWebSocketServer/Configuration/serverBufferBudget``).
public enum ServerBufferBudget: Hashable, Sendable {
    /// This many bytes.
    case bytes(Int)
    /// This fraction (0 to 1) of the machine's physical memory.
    case fractionOfPhysicalMemory(Double)
    /// No limit but each connection's own.
    case unlimited

    /// The limit in bytes; nil when there is none.
    public var bytes: Int? {
        switch self {
        case .bytes(let bytes): return max(0, bytes)
        case .fractionOfPhysicalMemory(let fraction):
            let pages = sysconf(Int32(_SC_PHYS_PAGES))
            let pageSize = sysconf(Int32(_SC_PAGESIZE))
            guard pages > 0, pageSize > 0 else { return nil }
            return Int(Double(pages) * Double(pageSize) * min(max(fraction, 0), 1))
        case .unlimited: return nil
        }
    }
}
