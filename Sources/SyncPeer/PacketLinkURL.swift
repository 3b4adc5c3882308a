// The URLs of packet links, for `SyncLink` and `bigpeer peer --upstream`:
//
//   l2cap://AA:BB:CC:DD:EE:FF/PSM[?random]   a BLE L2CAP channel (LE public address; `?random`: LE random)
//   seqpacket:///path/to/socket[?mtu=N]      the AF_UNIX SEQPACKET stand-in (tests; MTU default 247)

import Sockets
import SyncProtocol

public enum PacketLinkURL {
    /// The address and socket options `text` names; nil when it is not a packet-link URL.
    public static func parse(_ text: String) -> (address: PacketLinkAddress, options: PacketSocketOptions)? {
        if text.hasPrefix("l2cap://") {
            let rest = text.dropFirst("l2cap://".count)
            let (path, query) = split(rest)
            let parts = path.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let device = BluetoothAddress(parts[0]), let psm = UInt16(parts[1]), psm > 0,
                  query == nil || query == "random" else { return nil }
            return (.l2cap(L2CAPAddress(device: device, type: query == "random" ? .leRandom : .lePublic, psm: psm)), PacketSocketOptions())
        }
        if text.hasPrefix("seqpacket://") {
            let (path, query) = split(text.dropFirst("seqpacket://".count))
            guard path.hasPrefix("/"), path.utf8.count < 108 else { return nil }
            var options = PacketSocketOptions()
            if let query {
                guard query.hasPrefix("mtu="), let mtu = Int(query.dropFirst(4)), mtu >= PacketFraming.minimumMTU, mtu <= 65535 else { return nil }
                options.standInMTU = mtu
            }
            return (.unixStandIn(path: String(path)), options)
        }
        return nil
    }

    /// The link type presence lists for a sync URL (`l2cap://` and its stand-in: Bluetooth).
    public static func linkType(of url: String) -> LinkType {
        if url.hasPrefix("tcp://") || url.hasPrefix("tls://") { return .accessPoint }
        if url.hasPrefix("l2cap://") || url.hasPrefix("seqpacket://") { return .bluetooth }
        return .webSocket
    }

    private static func split(_ s: Substring) -> (Substring, Substring?) {
        guard let q = s.firstIndex(of: "?") else { return (s, nil) }
        return (s[..<q], s[s.index(after: q)...])
    }
}
