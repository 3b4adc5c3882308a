import Foundation

/// What the kernel says about the calling thread (`/proc/thread-self`): for tests of which thread
/// runs what, and with which scheduling.
public enum CurrentThread {
    /// The thread's name (`comm`, at most 15 characters).
    public static var name: String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The thread's time slice in nanoseconds (`se.slice` of `/proc/thread-self/sched`); nil on
    /// kernels that do not show it (before EEVDF, Linux 6.6).
    public static var slice: UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/thread-self/sched", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("se.slice") {
            return line.split(separator: ":").last.flatMap { UInt64($0.trimmingCharacters(in: .whitespaces)) }
        }
        return nil
    }
}
