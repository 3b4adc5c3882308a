import CEpoll

/// Moves the calling thread into a network namespace (`ip netns add NAME` makes
/// /var/run/netns/NAME): sockets the thread creates afterwards live there. Tests run an event
/// loop's thread inside a namespace of their own this way, so their multicast never reaches a
/// real interface. Needs CAP_SYS_ADMIN.
public enum NetworkNamespaceEntry {
    public static func enter(_ path: String) throws(IOError) {
        _ = try Syscall.call("setns(\(path))") { bp_enter_network_namespace(path) }
    }
}
