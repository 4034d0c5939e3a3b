/// Reading another process's cost from `/proc` while it runs (Linux): CPU time, resident and
/// peak memory, threads by name, and resident memory by mapping (`smaps`), so the scale
/// benchmarks can say what a worker costs without stopping it.
import Foundation

struct ProcessProbe {
    let pid: Int32

    /// User + system CPU seconds so far (`/proc/PID/stat`, fields 14 and 15, in clock ticks).
    func cpuSeconds() -> Double {
        guard let stat = read("stat"), let close = stat.lastIndex(of: ")") else { return 0 }
        // Fields after the command name start at field 3 (state).
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// `VmHWM` (peak resident set) in MiB.
    func peakRSS() -> Double { statusKiB("VmHWM") / 1024 }

    /// `VmRSS` (resident set now) in MiB.
    func rss() -> Double { statusKiB("VmRSS") / 1024 }

    /// Threads by name (`/proc/PID/task/TID/comm`), with a trailing number folded into `#`.
    func threadsByName() -> [(name: String, count: Int)] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        var counts: [String: Int] = [:]
        for tid in tasks {
            guard let comm = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/comm", encoding: .utf8) else { continue }
            let full = comm.trimmingCharacters(in: .whitespacesAndNewlines)
            let name = String(full.reversed().drop(while: \.isNumber).reversed())
            counts[name.count < full.count ? name + "#" : name, default: 0] += 1
        }
        return counts.sorted { ($0.value, $1.key) > ($1.value, $0.key) }.map { ($0.key, $0.value) }
    }

    /// Resident memory by mapping: each file by its name, and anonymous memory split into
    /// glibc malloc arenas (a read-write part followed by the PROT_NONE rest of its 64 MiB
    /// reservation), thread stacks (a read-write part right after a PROT_NONE guard page),
    /// `[heap]` (the main arena) and other anonymous memory.
    func residentByMapping() -> [(mapping: String, kib: Int)] {
        guard let smaps = read("smaps") else { return [] }
        var regions: [SmapsRegion] = []
        for line in smaps.split(separator: "\n") {
            if let region = SmapsRegion(header: line) {
                regions.append(region)
            } else if line.hasPrefix("Rss:"), !regions.isEmpty {
                regions[regions.count - 1].rssKiB = Int(line.split(separator: " ")[1]) ?? 0
            }
        }
        var totals: [String: Int] = [:]
        for (index, region) in regions.enumerated() where region.rssKiB > 0 {
            totals[region.category(before: index > 0 ? regions[index - 1] : nil, after: index + 1 < regions.count ? regions[index + 1] : nil), default: 0] +=
                region.rssKiB
        }
        return totals.sorted { $0.value > $1.value }.map { ($0.key, $0.value) }
    }

    private func statusKiB(_ key: String) -> Double {
        guard let status = read("status") else { return 0 }
        for line in status.split(separator: "\n") where line.hasPrefix(key + ":") {
            return Double(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
        }
        return 0
    }

    /// The whole file: `/proc` files report size 0 and come in pieces, so read until EOF.
    private func read(_ file: String) -> String? {
        let fd = open("/proc/\(pid)/\(file)", O_RDONLY)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = chunk.withUnsafeMutableBytes { Foundation.read(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// One mapping of `/proc/PID/smaps`: its address range, permissions, path and resident KiB.
private struct SmapsRegion {
    var start: UInt64
    var end: UInt64
    var permissions: Substring
    var path: String
    var rssKiB = 0

    /// A mapping's header line: `start-end perms offset dev inode [path]`.
    init?(header line: Substring) {
        let fields = line.split(separator: " ", maxSplits: 5, omittingEmptySubsequences: true)
        guard fields.count >= 5, let dash = fields[0].firstIndex(of: "-"),
            let start = UInt64(fields[0][..<dash], radix: 16),
            let end = UInt64(fields[0][fields[0].index(after: dash)...], radix: 16)
        else { return nil }
        self.start = start
        self.end = end
        permissions = fields[1]
        path = fields.count > 5 ? fields[5].trimmingCharacters(in: .whitespaces) : ""
    }

    func category(before: SmapsRegion?, after: SmapsRegion?) -> String {
        if path.hasPrefix("/") { return (path as NSString).lastPathComponent }
        if !path.isEmpty { return path }
        guard permissions.hasPrefix("rw") else { return "anonymous, other" }
        if let after, after.start == end, after.permissions.hasPrefix("---"), after.path.isEmpty,
            (after.end - start) == 64 << 20
        {
            return "anonymous: malloc arenas"
        }
        if let before, before.end == start, before.permissions.hasPrefix("---"), before.path.isEmpty {
            return "anonymous: thread stacks"
        }
        return "anonymous, other"
    }
}
