internal import Foundation

/// CPU time a process has used (user + system), from /proc/<pid>/stat (Linux; nil elsewhere), for the server
/// cost that `blip bench --workload fanin --self` reports.
enum ProcessCPUTime {
    static func of(_ processID: Int32) -> Duration? {
        guard let stat = try? String(contentsOfFile: "/proc/\(processID)/stat", encoding: .utf8),
            let endOfName = stat.range(of: ")", options: .backwards)
        else { return nil }
        // After the name (which may hold spaces) come field 3 (state) onwards; utime and stime are fields 14
        // and 15, in clock ticks.
        let fields = stat[endOfName.upperBound...].split(separator: " ")
        guard fields.count > 12, let user = Int(fields[11]), let system = Int(fields[12]) else { return nil }
        let ticksPerSecond = sysconf(Int32(_SC_CLK_TCK))
        return .milliseconds((user + system) * 1000 / ticksPerSecond)
    }
}
