import Glibc
import Sockets
import Synchronization

/// A policy file and the rules it held when last read well. `load` reads it at start (a bad
/// file is an error: the server does not start); `reloadIfChanged` reads it again when its
/// modification time, size or inode changed, and keeps the previous rules when the new version
/// is bad. `watch` calls it on a timer.
public final class PolicyRulesFile: Sendable {
    /// What a reload did, for the server's log.
    public enum ReloadOutcome: Sendable, Equatable {
        case unchanged
        case reloaded(rules: Int)
        /// The file changed but cannot be used; the previous rules stay.
        case rejected(PolicyConfigurationError)
    }

    /// What tells one version of the file from another without reading it.
    struct Stamp: Sendable, Equatable {
        var seconds: Int
        var nanoseconds: Int
        var size: Int
        var inode: UInt
    }

    private struct State: Sendable {
        var rules: PolicyRules
        var stamp: Stamp?
    }

    public let path: String
    public let limits: PolicyRules.Limits
    private let state: Mutex<State>

    public init(path: String, limits: PolicyRules.Limits = PolicyRules.Limits()) throws(PolicyConfigurationError) {
        self.path = path
        self.limits = limits
        let stamp = Self.stamp(path)
        let rules = try Self.read(path, limits: limits)
        state = Mutex(State(rules: rules, stamp: stamp))
    }

    /// The rules in force.
    public var current: PolicyRules { state.withLock { $0.rules } }

    public func reloadIfChanged() -> ReloadOutcome {
        let stamp = Self.stamp(path)
        if state.withLock({ $0.stamp }) == stamp { return .unchanged }
        do {
            let rules = try Self.read(path, limits: limits)
            state.withLock { $0 = State(rules: rules, stamp: stamp) }
            return .reloaded(rules: rules.rules.count)
        } catch {
            // Remembered, so a bad version is reported once, not on every poll.
            state.withLock { $0.stamp = stamp }
            return .rejected(error)
        }
    }

    /// Polls the file every `interval` until the task is cancelled; `report` hears every outcome
    /// but `.unchanged`.
    public func watch(every interval: Duration = .seconds(1), report: @escaping @Sendable (ReloadOutcome) -> Void) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                do { try await Task.sleep(for: interval) } catch { return }
                let outcome = reloadIfChanged()
                if outcome != .unchanged { report(outcome) }
            }
        }
    }

    static func read(_ path: String, limits: PolicyRules.Limits) throws(PolicyConfigurationError) -> PolicyRules {
        guard let stamp = stamp(path) else { throw PolicyConfigurationError(path, "cannot read the policy file (\(String(cString: strerror(errno))))") }
        // The size first: a huge file is refused without reading it.
        guard stamp.size <= limits.maxFileBytes else {
            throw PolicyConfigurationError(path, "the file has \(stamp.size) bytes (at most \(limits.maxFileBytes))")
        }
        guard let bytes = FileBytes.read(path, maxBytes: limits.maxFileBytes) else {
            throw PolicyConfigurationError(path, "cannot read the policy file, or it grew past \(limits.maxFileBytes) bytes")
        }
        do {
            return try PolicyRules.parse(bytes, limits: limits)
        } catch {
            throw PolicyConfigurationError(error.location.isEmpty ? path : "\(path): \(error.location)", error.message)
        }
    }

    static func stamp(_ path: String) -> Stamp? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Stamp(seconds: Int(st.st_mtim.tv_sec), nanoseconds: Int(st.st_mtim.tv_nsec), size: Int(st.st_size), inode: UInt(st.st_ino))
    }
}
