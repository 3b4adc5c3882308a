// Message-preserving (SOCK_SEQPACKET) sockets: Bluetooth LE L2CAP connection-oriented channels,
// and AF_UNIX SEQPACKET sockets standing in for them where there is no radio (tests). The family
// is the one thing that differs: framing, flow control and the sync session above are the same.

import CEpoll
import Glibc

/// Where a packet link listens or connects.
public enum PacketLinkAddress: Hashable, Sendable, CustomStringConvertible {
    /// An LE L2CAP channel (BlueZ kernel socket).
    case l2cap(L2CAPAddress)
    /// An `AF_UNIX` `SOCK_SEQPACKET` socket at a filesystem path: the stand-in for L2CAP. It keeps
    /// message boundaries as L2CAP does; the MTU is `PacketSocketOptions.standInMTU`.
    case unixStandIn(path: String)

    public var description: String {
        switch self {
        case .l2cap(let a): "l2cap:\(a)"
        case .unixStandIn(let path): "unix-seqpacket:\(path)"
        }
    }
}

public struct PacketSocketOptions: Sendable {
    /// `BT_SECURITY` set before bind/connect (L2CAP only); nil leaves the kernel's default (medium).
    public var security: BluetoothSecurity?
    /// The MTU both ways on the `AF_UNIX` stand-in, which has none of its own: a packet above it
    /// is refused on sending (`EMSGSIZE`, as L2CAP does) and closes the link on receiving.
    /// L2CAP reads its MTUs from the kernel (`BT_SNDMTU`, `BT_RCVMTU`) after connecting.
    public var standInMTU = 247
    public init(security: BluetoothSecurity? = nil, standInMTU: Int = 247) {
        self.security = security
        self.standInMTU = standInMTU
    }
}

/// Why a packet socket could not be made.
public enum PacketSocketError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No Bluetooth here: the kernel lacks `AF_BLUETOOTH` (EAFNOSUPPORT) or L2CAP, or there is no
    /// adapter (bind/connect: ENODEV, EADDRNOTAVAIL, EHOSTUNREACH). Report once and run without BLE.
    case bleUnavailable(IOError)
    case io(IOError)

    public var description: String {
        switch self {
        case .bleUnavailable(let e): "BLE unavailable: \(String(cString: strerror(e.errno))) (\(e.call), errno \(e.errno))"
        case .io(let e): e.description
        }
    }
}

public enum PacketSockets {
    /// A non-blocking, close-on-exec SEQPACKET socket of `address`'s family, with `options`' security set.
    static func open(for address: PacketLinkAddress, options: PacketSocketOptions) throws(PacketSocketError) -> Int32 {
        let type = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        switch address {
        case .unixStandIn:
            do { return try Syscall.call("socket(AF_UNIX, SOCK_SEQPACKET)") { socket(AF_UNIX, type, 0) } } catch { throw .io(error) }
        case .l2cap:
            let fd: Int32
            do {
                fd = try Syscall.call("socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)") {
                    socket(BluetoothSocketConstants.addressFamily, type, BluetoothSocketConstants.l2capProtocol)
                }
            } catch {
                throw classify(error)
            }
            if let security = options.security {
                let rc = security.optionBytes.withUnsafeBytes {
                    setsockopt(fd, BluetoothSocketConstants.level, BluetoothSocketConstants.security, $0.baseAddress, 2)
                }
                if rc != 0 {
                    let e = IOError(call: "setsockopt(BT_SECURITY)", errno: bp_errno())
                    Syscall.close(fd)
                    throw .io(e)
                }
            }
            return fd
        }
    }

    /// Why BLE cannot be used here (nil when an L2CAP socket can be made): for a command that
    /// needs BLE to fail with "BLE unavailable: …" before it starts.
    public static func bluetoothUnavailable() -> PacketSocketError? {
        do {
            Syscall.close(try open(for: .l2cap(L2CAPAddress(device: .any, psm: 0)), options: PacketSocketOptions()))
            return nil
        } catch {
            return error
        }
    }

    /// The "no Bluetooth here" errnos become `bleUnavailable`; anything else stays an I/O error.
    static func classify(_ error: IOError) -> PacketSocketError {
        switch error.errno {
        case EAFNOSUPPORT, EPROTONOSUPPORT, ESOCKTNOSUPPORT, ENODEV, EADDRNOTAVAIL, EHOSTUNREACH: .bleUnavailable(error)
        default: .io(error)
        }
    }

    static func withSockaddr<R>(_ address: PacketLinkAddress, _ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        switch address {
        case .l2cap(let a): return a.withSockaddr(body)
        case .unixStandIn(let path):
            var sun = sockaddr_un()
            sun.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &sun.sun_path) { dst in
                let bytes = Array(path.utf8.prefix(dst.count - 1))
                dst.copyBytes(from: bytes)
            }
            return withUnsafePointer(to: &sun) { p in
                p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
        }
    }

    /// The address a socket is bound to, when it is L2CAP (the PSM the kernel chose for psm 0).
    public static func boundL2CAPAddress(of fd: Int32) -> L2CAPAddress? {
        var raw = bp_sockaddr_l2()
        var len = socklen_t(MemoryLayout<bp_sockaddr_l2>.size)
        let rc = withUnsafeMutablePointer(to: &raw) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        guard rc == 0 else { return nil }
        return L2CAPAddress(sockaddrBytes: withUnsafeBytes(of: raw) { Array($0) })
    }

    /// `BT_SNDMTU` and `BT_RCVMTU` (u16 each) of a connected L2CAP socket.
    static func l2capMTUs(of fd: Int32) throws(PacketSocketError) -> (send: Int, receive: Int) {
        func read(_ option: Int32, _ name: String) throws(PacketSocketError) -> Int {
            var value: UInt16 = 0
            var len = socklen_t(2)
            guard getsockopt(fd, BluetoothSocketConstants.level, option, &value, &len) == 0 else {
                throw .io(IOError(call: "getsockopt(\(name))", errno: bp_errno()))
            }
            return Int(value)
        }
        return (try read(BluetoothSocketConstants.sendMTU, "BT_SNDMTU"), try read(BluetoothSocketConstants.receiveMTU, "BT_RCVMTU"))
    }

    /// The MTUs of a connected socket of `address`'s family.
    static func mtus(of fd: Int32, address: PacketLinkAddress, options: PacketSocketOptions) throws(PacketSocketError) -> (send: Int, receive: Int) {
        switch address {
        case .l2cap: try l2capMTUs(of: fd)
        case .unixStandIn: (options.standInMTU, options.standInMTU)
        }
    }
}
