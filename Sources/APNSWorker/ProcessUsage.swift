import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// This process's resident memory and CPU time, for the fleet heartbeat (Sidekiq shows both
/// per process). Linux: RSS from `/proc/self/statm`, CPU from `getrusage`.
enum ProcessUsage {
    /// Resident set size in bytes; 0 where `/proc` is not available.
    static func residentBytes() -> Int {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return 0 }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return 0 }
        return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    }

    /// User plus system CPU seconds since the process started.
    static func cpuSeconds() -> Double {
        var usage = rusage()
        guard getrusage(RUSAGE_SELF.rawValue, &usage) == 0 else { return 0 }
        func seconds(_ time: timeval) -> Double { Double(time.tv_sec) + Double(time.tv_usec) / 1_000_000 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }
}
