import CEpoll
import Glibc

/// An IPv4 or IPv6 socket address, stored as `sockaddr_storage` so one type serves both families
/// (and later UDP multicast, which needs the same bind/join addresses).
public struct SocketAddress: Sendable, CustomStringConvertible {
    var storage: sockaddr_storage
    var length: socklen_t

    public var family: Int32 { Int32(storage.ss_family) }

    /// Parses a numeric IPv4 or IPv6 literal (no DNS: the loop must never block on a resolver).
    public init(ip: String, port: Int) throws(IOError) {
        var storage = sockaddr_storage()
        var length: socklen_t = 0
        let p = UInt16(truncatingIfNeeded: port).bigEndian
        var ok: Int32 = 0
        withUnsafeMutableBytes(of: &storage) { raw in
            if ip.contains(":") {
                let sin6 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                sin6.pointee.sin6_port = p
                ok = inet_pton(AF_INET6, ip, &sin6.pointee.sin6_addr)
                length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            } else {
                let sin = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                sin.pointee.sin_family = sa_family_t(AF_INET)
                sin.pointee.sin_port = p
                ok = inet_pton(AF_INET, ip, &sin.pointee.sin_addr)
                length = socklen_t(MemoryLayout<sockaddr_in>.size)
            }
        }
        guard ok == 1, (0...65535).contains(port) else { throw IOError(call: "inet_pton(\(ip))", errno: EINVAL) }
        self.storage = storage
        self.length = length
    }

    /// An address from its bytes in network order (4: IPv4, 16: IPv6; `scopeID` is the interface
    /// index a link-local IPv6 address needs). Nil for any other length.
    public init?(ipBytes bytes: [UInt8], port: Int, scopeID: UInt32 = 0) {
        var storage = sockaddr_storage()
        var length: socklen_t = 0
        let p = UInt16(truncatingIfNeeded: port).bigEndian
        switch bytes.count {
        case 4:
            withUnsafeMutableBytes(of: &storage) { raw in
                let sin = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in.self)
                sin.pointee.sin_family = sa_family_t(AF_INET)
                sin.pointee.sin_port = p
                withUnsafeMutableBytes(of: &sin.pointee.sin_addr) { $0.copyBytes(from: bytes) }
            }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
        case 16:
            withUnsafeMutableBytes(of: &storage) { raw in
                let sin6 = raw.baseAddress!.assumingMemoryBound(to: sockaddr_in6.self)
                sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                sin6.pointee.sin6_port = p
                sin6.pointee.sin6_scope_id = scopeID
                withUnsafeMutableBytes(of: &sin6.pointee.sin6_addr) { $0.copyBytes(from: bytes) }
            }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
        default:
            return nil
        }
        self.storage = storage
        self.length = length
    }

    /// The address's bytes in network order (4 or 16).
    public var ipBytes: [UInt8] {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 { return withUnsafeBytes(of: raw.load(as: sockaddr_in6.self).sin6_addr) { Array($0) } }
            return withUnsafeBytes(of: raw.load(as: sockaddr_in.self).sin_addr) { Array($0) }
        }
    }

    init(storage: sockaddr_storage, length: socklen_t) {
        self.storage = storage
        self.length = length
    }

    /// Resolves `host` with getaddrinfo. This blocks: call it off the event loops (the HTTP client
    /// does so from a detached task); numeric hosts never reach the resolver.
    public static func resolve(host: String, port: Int) throws(IOError) -> [SocketAddress] {
        if let numeric = try? SocketAddress(ip: host, port: port) { return [numeric] }
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_family = AF_UNSPEC
        var res: UnsafeMutablePointer<addrinfo>?
        let rc = getaddrinfo(host, String(port), &hints, &res)
        guard rc == 0, let first = res else { throw IOError(call: "getaddrinfo(\(host))", errno: rc == EAI_SYSTEM ? bp_errno() : ENOENT) }
        defer { freeaddrinfo(first) }
        var out: [SocketAddress] = []
        var cur: UnsafeMutablePointer<addrinfo>? = first
        while let ai = cur {
            if let sa = ai.pointee.ai_addr, Int(ai.pointee.ai_addrlen) <= MemoryLayout<sockaddr_storage>.size {
                var storage = sockaddr_storage()
                withUnsafeMutableBytes(of: &storage) { dst in
                    dst.copyMemory(from: UnsafeRawBufferPointer(start: sa, count: Int(ai.pointee.ai_addrlen)))
                }
                out.append(SocketAddress(storage: storage, length: ai.pointee.ai_addrlen))
            }
            cur = ai.pointee.ai_next
        }
        if out.isEmpty { throw IOError(call: "getaddrinfo(\(host))", errno: ENOENT) }
        return out
    }

    public var port: Int {
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                return Int(UInt16(bigEndian: raw.load(as: sockaddr_in6.self).sin6_port))
            }
            return Int(UInt16(bigEndian: raw.load(as: sockaddr_in.self).sin_port))
        }
    }

    /// The numeric host, e.g. `127.0.0.1` or `::1`.
    public var host: String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN) + 1)
        withUnsafeBytes(of: storage) { raw in
            if family == AF_INET6 {
                var a = raw.load(as: sockaddr_in6.self).sin6_addr
                _ = inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
            } else {
                var a = raw.load(as: sockaddr_in.self).sin_addr
                _ = inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
            }
        }
        return String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public var description: String { family == AF_INET6 ? "[\(host)]:\(port)" : "\(host):\(port)" }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        withUnsafeBytes(of: storage) { raw in
            body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), length)
        }
    }

    /// The local address a socket is bound to (`getsockname`): how tests learn the port given for 0.
    static func local(of fd: Int32) throws(IOError) -> SocketAddress {
        var storage = sockaddr_storage()
        var len = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = try withUnsafeMutableBytes(of: &storage) { (raw) throws(IOError) -> Int32 in
            try Syscall.call("getsockname") {
                getsockname(fd, raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), &len)
            }
        }
        return SocketAddress(storage: storage, length: len)
    }
}
