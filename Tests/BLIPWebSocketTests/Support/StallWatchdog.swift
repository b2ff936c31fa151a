import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Diagnostic only (BLIP_STALL_WATCHDOG=dir): probes the singleton event loops and the cooperative pool every
/// 250 ms; when a probe waits over 2 s, dumps every thread's stack with gdb into dir.
enum StallWatchdog {
    static let started: Void = {
        guard let directory = ProcessInfo.processInfo.environment["BLIP_STALL_WATCHDOG"] else { return }
        Thread.detachNewThread { run(directory: directory) }
    }()

    static func run(directory: String) {
        let loops = Array(MultiThreadedEventLoopGroup.singleton.makeIterator())
        let pending = NIOLockedValueBox([String: Date]())
        var dumps = 0
        var probe = 0
        while dumps < 6 {
            probe += 1
            let now = Date()
            for (index, loop) in loops.enumerated() {
                let key = "loop\(index)#\(probe)"
                pending.withLockedValue { $0[key] = now }
                loop.execute { _ = pending.withLockedValue { $0.removeValue(forKey: key) } }
            }
            let key = "pool#\(probe)"
            pending.withLockedValue { $0[key] = now }
            Task.detached { _ = pending.withLockedValue { $0.removeValue(forKey: key) } }
            Thread.sleep(forTimeInterval: 0.25)
            let stalled = pending.withLockedValue { $0.filter { Date().timeIntervalSince($0.value) > 2 } }
            if !stalled.isEmpty {
                dumps += 1
                let names = stalled.keys.sorted().joined(separator: " ")
                let file = "\(directory)/stall-\(getpid())-\(dumps).txt"
                _ = FileManager.default.createFile(atPath: file, contents: Data("stalled: \(names)\n".utf8))
                let gdb = Process()
                gdb.executableURL = URL(fileURLWithPath: "/usr/bin/gdb")
                gdb.arguments = ["-batch", "-p", "\(getpid())", "-ex", "thread apply all bt 30"]
                let handle = FileHandle(forWritingAtPath: file)!
                handle.seekToEndOfFile()
                gdb.standardOutput = handle
                gdb.standardError = handle
                try? gdb.run()
                gdb.waitUntilExit()
                // Forget this episode's probes and wait for the loops to come back.
                Thread.sleep(forTimeInterval: 5)
                pending.withLockedValue { $0.removeAll() }
            }
        }
    }
}
