// Where the bus is (spec: "Server Addresses"): `unix:path=…` or `unix:abstract=…`, values
// %-escaped, several addresses separated by `;` (the first usable one is taken).

import DBus
import Glibc

public enum DBusBusAddress: Equatable, Sendable, CustomStringConvertible {
    case path(String)
    case abstract(String)

    public static let defaultSystemBus = "unix:path=/run/dbus/system_bus_socket"

    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS` or the well-known socket.
    public static func systemBus(environment: [String: String]) -> String {
        environment["DBUS_SYSTEM_BUS_ADDRESS"].flatMap { $0.isEmpty ? nil : $0 } ?? defaultSystemBus
    }

    public init(parsing text: String) throws(DBusConnectionError) {
        for entry in text.split(separator: ";") {
            guard let colon = entry.firstIndex(of: ":"), entry[..<colon] == "unix" else { continue }
            var pairs: [String: String] = [:]
            for pair in entry[entry.index(after: colon)...].split(separator: ",") {
                guard let eq = pair.firstIndex(of: "=") else { throw .badAddress(text, "\"\(pair)\" is not key=value") }
                pairs[String(pair[..<eq])] = try Self.unescape(pair[pair.index(after: eq)...], in: text)
            }
            if let p = pairs["path"] { self = .path(p); return }
            if let a = pairs["abstract"] { self = .abstract(a); return }
        }
        throw .badAddress(text, "no unix:path= or unix:abstract= address")
    }

    static func unescape(_ value: Substring, in text: String) throws(DBusConnectionError) -> String {
        var out: [UInt8] = []
        var bytes = Array(value.utf8)[...]
        while let b = bytes.popFirst() {
            guard b == UInt8(ascii: "%") else { out.append(b); continue }
            guard bytes.count >= 2, let v = UInt8(String(decoding: bytes.prefix(2), as: UTF8.self), radix: 16) else {
                throw .badAddress(text, "bad %-escape")
            }
            out.append(v)
            bytes = bytes.dropFirst(2)
        }
        return String(decoding: out, as: UTF8.self)
    }

    public var description: String {
        switch self {
        case .path(let p): "unix:path=\(p)"
        case .abstract(let a): "unix:abstract=\(a)"
        }
    }

    /// A connected, non-blocking AF_UNIX stream socket. Connecting to a local socket completes at
    /// once or fails at once (no EINPROGRESS for AF_UNIX).
    func connectSocket() throws(DBusConnectionError) -> Int32 {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let (name, leadingNul): ([UInt8], Bool) = switch self {
        case .path(let p): (Array(p.utf8), false)
        case .abstract(let a): (Array(a.utf8), true)
        }
        let capacity = MemoryLayout.size(ofValue: addr.sun_path)
        let offset = leadingNul ? 1 : 0
        guard name.count + offset < capacity else { throw .badAddress(description, "socket path too long") }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in name.enumerated() { raw[i + offset] = b }
        }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + offset + name.count + (leadingNul ? 0 : 1))
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw .unreachable(description, errno: errno) }
        let rc = withUnsafePointer(to: &addr) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, length) }
        }
        guard rc == 0 else {
            let e = errno
            close(fd)
            throw .unreachable(description, errno: e)
        }
        return fd
    }
}

public enum DBusConnectionError: Error, Equatable, Sendable, CustomStringConvertible {
    case badAddress(String, String)
    case unreachable(String, errno: Int32)
    case protocolError(DBusError)
    case closed(String)
    case timedOut(String)
    /// The other side answered with an error reply.
    case errorReply(name: String, message: String)

    public var description: String {
        switch self {
        case .badAddress(let a, let why): "bad D-Bus address \"\(a)\": \(why)"
        case .unreachable(let a, let e): "cannot connect to the D-Bus at \(a): \(String(cString: strerror(e)))"
        case .protocolError(let e): "\(e)"
        case .closed(let why): "D-Bus connection closed: \(why)"
        case .timedOut(let what): "no D-Bus reply to \(what) in time"
        case .errorReply(let name, let message): "\(name): \(message)"
        }
    }
}
