// Bluetooth LE L2CAP addressing and socket options, encoded as the Linux kernel reads them
// (include/net/bluetooth/bluetooth.h, l2cap.h; the C mirror with its layout checks is in CEpoll.h).
// No libbluetooth: these are plain structs handed to socket calls.

import CEpoll
import Glibc

/// A Bluetooth device address in display order (`AA:BB:CC:DD:EE:FF`: `octets[0]` is `AA`).
/// The kernel stores it reversed (`bdaddr_t.b[0]` is the last octet).
public struct BluetoothAddress: Hashable, Sendable, CustomStringConvertible {
    public var octets: [UInt8]

    /// `00:00:00:00:00:00`: bind to any adapter.
    public static let any = BluetoothAddress(uncheckedOctets: [0, 0, 0, 0, 0, 0])

    fileprivate init(uncheckedOctets octets: [UInt8]) { self.octets = octets }

    /// Six octets in display order; nil for any other count.
    public init?(octets: [UInt8]) {
        guard octets.count == 6 else { return nil }
        self.octets = octets
    }

    /// Parses `AA:BB:CC:DD:EE:FF` (hex, either case); nil if it is not six octets.
    public init?(_ text: some StringProtocol) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var octets: [UInt8] = []
        for p in parts {
            guard p.count == 2, let v = UInt8(p, radix: 16) else { return nil }
            octets.append(v)
        }
        self.octets = octets
    }

    public var description: String {
        octets.map { ($0 < 16 ? "0" : "") + String($0, radix: 16, uppercase: true) }.joined(separator: ":")
    }
}

/// `sockaddr_l2` for an LE connection-oriented channel: an LE address type plus a PSM makes the
/// kernel use LE credit-based flow control.
public struct L2CAPAddress: Hashable, Sendable, CustomStringConvertible {
    /// `l2_bdaddr_type` (BDADDR_LE_PUBLIC / BDADDR_LE_RANDOM).
    public enum AddressType: UInt8, Sendable {
        case lePublic = 1
        case leRandom = 2
    }

    public var device: BluetoothAddress
    public var type: AddressType
    /// 0 when binding: the kernel picks a free dynamic LE PSM (0x80–0xFF).
    public var psm: UInt16
    public var cid: UInt16

    public init(device: BluetoothAddress, type: AddressType = .lePublic, psm: UInt16, cid: UInt16 = 0) {
        self.device = device
        self.type = type
        self.psm = psm
        self.cid = cid
    }

    public var description: String { "\(device)/\(type == .lePublic ? "public" : "random") psm \(psm)" }

    /// The 14 bytes of `struct sockaddr_l2`: family (host order), PSM and CID little-endian, the
    /// address reversed, the address type, one byte of padding.
    public var sockaddrBytes: [UInt8] {
        let family = UInt16(BP_AF_BLUETOOTH)
        var out = withUnsafeBytes(of: family) { Array($0) }
        out += [UInt8(psm & 0xFF), UInt8(psm >> 8)]
        out += device.octets.reversed()
        out += [UInt8(cid & 0xFF), UInt8(cid >> 8), type.rawValue, 0]
        return out
    }

    /// Reads a kernel `sockaddr_l2` (what `getsockname`/`accept` return); nil if it is not one.
    public init?(sockaddrBytes b: [UInt8]) {
        guard b.count >= 13, b.withUnsafeBytes({ $0.load(as: UInt16.self) }) == UInt16(BP_AF_BLUETOOTH),
              let type = AddressType(rawValue: b[12]) else { return nil }
        self.init(device: BluetoothAddress(uncheckedOctets: Array(b[4..<10].reversed())),
                  type: type, psm: UInt16(b[2]) | UInt16(b[3]) << 8, cid: UInt16(b[10]) | UInt16(b[11]) << 8)
    }

    func withSockaddr<R>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> R) -> R {
        var raw = bp_sockaddr_l2()
        withUnsafeMutableBytes(of: &raw) { dst in sockaddrBytes.withUnsafeBytes { dst.copyMemory(from: $0) } }
        return withUnsafePointer(to: &raw) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<bp_sockaddr_l2>.size)) }
        }
    }
}

/// `BT_SECURITY` (`struct bt_security { u8 level; u8 key_size; }`): how strongly the channel is
/// protected. The kernel's default is medium (encrypted, unauthenticated pairing allowed).
public struct BluetoothSecurity: Hashable, Sendable {
    public enum Level: UInt8, Sendable {
        case sdp = 0, low = 1, medium = 2, high = 3, fips = 4
    }
    public var level: Level
    /// 0: the kernel's choice.
    public var keySize: UInt8

    public init(level: Level, keySize: UInt8 = 0) {
        self.level = level
        self.keySize = keySize
    }

    /// The option's two bytes as `setsockopt(SOL_BLUETOOTH, BT_SECURITY)` takes them.
    public var optionBytes: [UInt8] { [level.rawValue, keySize] }
}

/// The `SOL_BLUETOOTH` option numbers and the socket constants, as the kernel defines them.
public enum BluetoothSocketConstants {
    public static let addressFamily = Int32(BP_AF_BLUETOOTH)
    public static let l2capProtocol = Int32(BP_BTPROTO_L2CAP)
    public static let level = Int32(BP_SOL_BLUETOOTH)
    public static let security = Int32(BP_BT_SECURITY)
    public static let sendMTU = Int32(BP_BT_SNDMTU)
    public static let receiveMTU = Int32(BP_BT_RCVMTU)
}
