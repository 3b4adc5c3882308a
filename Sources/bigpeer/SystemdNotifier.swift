import Glibc

/// The service manager's readiness protocol (sd_notify(3)): under systemd with `Type=notify`,
/// `NOTIFY_SOCKET` names a Unix datagram socket to which the service reports `READY=1` once it
/// serves and `STOPPING=1` when it starts to drain (deploy/systemd/bigpeer.service). Without the
/// variable nothing is sent. The message is one datagram; a failure to send is not an error of the
/// server's (systemd then times the start out and says so).
struct SystemdNotifier {
    let path: [UInt8]

    /// Nil when the process was not started with `NOTIFY_SOCKET` (not under systemd's notify).
    init?(environment: String? = getenv("NOTIFY_SOCKET").map { String(cString: $0) }) {
        guard let value = environment, !value.isEmpty else { return nil }
        var bytes = Array(value.utf8)
        // `@name`: a socket in the abstract namespace, whose address starts with a NUL byte.
        if bytes.first == UInt8(ascii: "@") { bytes[0] = 0 }
        // Only absolute paths and abstract names are valid, and the address must fit sun_path.
        guard bytes.first == 0 || bytes.first == UInt8(ascii: "/"),
              bytes.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else { return nil }
        path = bytes
    }

    /// Sends `state` (newline-separated `KEY=VALUE` lines). True when the datagram was sent.
    @discardableResult
    func notify(_ state: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, b) in path.enumerated() { raw[i] = b }
        }
        // Abstract names are exactly as long as given; paths end at their NUL.
        let length = MemoryLayout<sa_family_t>.size + path.count + (path.first == 0 ? 0 : 1)
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { a in
            a.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa in
                message.withUnsafeBytes { sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), sa, socklen_t(length)) }
            }
        }
        return sent == message.count
    }
}
