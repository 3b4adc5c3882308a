import Glibc
import Sockets

/// The standard `process_*` metrics (the names every Prometheus client library uses), read from
/// /proc at scrape time.
public enum ProcessMetrics {
    public static let cpuSeconds = MetricFamily("process_cpu_seconds_total", .counter, "User and system CPU time spent, in seconds.")
    public static let residentBytes = MetricFamily("process_resident_memory_bytes", .gauge, "Resident memory size in bytes.")
    public static let virtualBytes = MetricFamily("process_virtual_memory_bytes", .gauge, "Virtual memory size in bytes.")
    public static let openFDs = MetricFamily("process_open_fds", .gauge, "Open file descriptors.")
    public static let maxFDs = MetricFamily("process_max_fds", .gauge, "Limit on open file descriptors (RLIMIT_NOFILE).")
    public static let startTime = MetricFamily("process_start_time_seconds", .gauge, "Start time of the process since the Unix epoch, in seconds.")

    public static let families = [cpuSeconds, residentBytes, virtualBytes, openFDs, maxFDs, startTime]

    public static func register(on registry: MetricsRegistry) {
        registry.register(families) { w in
            let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
            let pageSize = Double(sysconf(Int32(_SC_PAGESIZE)))
            if let stat = readStat(), ticks > 0 {
                w.sample(cpuSeconds, (stat.utime + stat.stime) / ticks)
                w.sample(residentBytes, stat.rssPages * pageSize)
                w.sample(virtualBytes, stat.vsize)
                if let boot = bootTime() { w.sample(startTime, boot + stat.starttime / ticks) }
            }
            w.sample(openFDs, countOpenFDs())
            var limit = rlimit()
            if getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 { w.sample(maxFDs, Double(limit.rlim_cur)) }
        }
    }

    private struct Stat { var utime, stime, starttime, vsize, rssPages: Double }

    /// Fields 14, 15, 22, 23, 24 of /proc/self/stat (proc(5)); counted after the `)` that ends
    /// the command name, which may itself hold spaces.
    private static func readStat() -> Stat? {
        guard let text = readFile("/proc/self/stat"), let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // fields[0] is field 3 (state).
        func field(_ n: Int) -> Double? { n - 3 < fields.count ? Double(fields[n - 3]) : nil }
        guard let u = field(14), let s = field(15), let start = field(22), let vsize = field(23), let rss = field(24) else { return nil }
        return Stat(utime: u, stime: s, starttime: start, vsize: vsize, rssPages: rss)
    }

    private static func bootTime() -> Double? {
        guard let text = readFile("/proc/stat") else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("btime ") {
            return Double(line.dropFirst(6))
        }
        return nil
    }

    private static func countOpenFDs() -> Int {
        guard let dir = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(dir) }
        var n = 0
        while let entry = readdir(dir) {
            if entry.pointee.d_name.0 != 0x2E { n += 1 }  // skip "." and ".."
        }
        return max(0, n - 1)  // the descriptor opendir holds
    }

    private static func readFile(_ path: String) -> String? {
        FileBytes.read(path).map { String(decoding: $0, as: UTF8.self) }
    }
}
