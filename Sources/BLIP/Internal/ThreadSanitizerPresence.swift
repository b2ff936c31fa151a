#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Whether this process runs under ThreadSanitizer (built with `-sanitize=thread`), found once from its
/// runtime's symbols. Some synchronization exists only so that ThreadSanitizer can see it (see
/// ``ConnectionCore/handOff(function:_:)``); a normal build skips it.
enum ThreadSanitizerPresence {
    static let isActive: Bool = {
        #if canImport(Glibc) || canImport(Musl) || canImport(Darwin)
            // RTLD_DEFAULT: every image loaded in the process.
            dlsym(UnsafeMutableRawPointer(bitPattern: 0), "__tsan_init") != nil
        #else
            false
        #endif
    }()
}
