internal import Foundation

/// Resident memory of a process, read from /proc/<pid>/status (Linux; nil elsewhere), for the memory
/// workloads of `blip bench`.
enum ProcessMemory {
    /// VmRSS: resident now.
    static func resident(of processID: Int32) -> Int? { self.field("VmRSS", of: processID) }

    /// VmHWM: the most the process has ever had resident.
    static func peakResident(of processID: Int32) -> Int? { self.field("VmHWM", of: processID) }

    private static func field(_ name: String, of processID: Int32) -> Int? {
        guard let status = try? String(contentsOfFile: "/proc/\(processID)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") })
        else { return nil }
        return line.split(separator: " ").compactMap { Int($0) }.first.map { $0 * 1024 }  // the file says kB
    }
}
