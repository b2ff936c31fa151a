import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix

/// Diagnostic only (BLIP_STALL_WATCHDOG=dir): probes the singleton event loops, the hand-driven peers' loops
/// and the cooperative pool every 250 ms. When a probe waits over 2 s, dumps every thread's stack with gdb
/// into dir; each second, writes the longest wait so far of each probed executor to dir/worst-<pid>.txt.
enum StallWatchdog {
    static let started: Void = {
        guard let directory = ProcessInfo.processInfo.environment["BLIP_STALL_WATCHDOG"] else { return }
        Thread.detachNewThread { run(directory: directory) }
    }()

    private struct Probes {
        /// When each outstanding probe was sent, by "executor#probe".
        var pending: [String: Date] = [:]
        /// The longest any probe of an executor took to run, in seconds.
        var worst: [String: TimeInterval] = [:]

        mutating func finish(_ executor: String, _ probe: Int) {
            guard let sent = self.pending.removeValue(forKey: "\(executor)#\(probe)") else { return }
            self.worst[executor] = max(self.worst[executor] ?? 0, Date().timeIntervalSince(sent))
        }
    }

    static func run(directory: String) {
        let singleton = MultiThreadedEventLoopGroup.singleton.makeIterator().enumerated().map { ("loop\($0)", $1) }
        let rawPeers = rawPeerEventLoops.makeIterator().enumerated().map { ("rawPeerLoop\($0)", $1) }
        let probes = NIOLockedValueBox(Probes())
        var dumps = 0
        var probe = 0
        while dumps < 6 {
            probe += 1
            let now = Date()
            for (executor, loop) in singleton + rawPeers {
                probes.withLockedValue { $0.pending["\(executor)#\(probe)"] = now }
                loop.execute { [probe] in probes.withLockedValue { $0.finish(executor, probe) } }
            }
            probes.withLockedValue { $0.pending["pool#\(probe)"] = now }
            Task.detached { [probe] in probes.withLockedValue { $0.finish("pool", probe) } }
            Thread.sleep(forTimeInterval: 0.25)
            if probe % 4 == 0 {
                let worst = probes.withLockedValue { $0.worst }
                let lines = worst.keys.sorted().map { "\($0) \(String(format: "%.3f", worst[$0]!)) s\n" }
                try? lines.joined().write(
                    toFile: "\(directory)/worst-\(getpid()).txt",
                    atomically: true,
                    encoding: .utf8
                )
            }
            let stalled = probes.withLockedValue { $0.pending.filter { Date().timeIntervalSince($0.value) > 2 } }
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
                probes.withLockedValue { $0.pending.removeAll() }
            }
        }
    }
}
