// Which BigPeer node a small peer dials over BLE (`bigpeer peer --ble` without `--url`), from the
// scanner's events and whether the link is up, without I/O:
//
//   found / updated (matching name) ─▶ a candidate; none dialled yet ─▶ dial it
//   lost (the dialled node)         ─▶ link down: dial the next candidate (or hang up, and wait)
//                                      link up:   keep the link; decide when it goes down
//   link down, dialled node lost or its address/PSM changed ─▶ dial again (next / new URL)

import Sockets

public struct BLENodeChooser: Sendable {
    public enum Action: Equatable, Sendable {
        /// Hang up the current link, if any, and dial `url` (the node `peer`).
        case dial(BLEPeer, url: String)
        /// Hang up: no node to dial until the scanner finds one.
        case hangUp
    }

    /// Only nodes advertising this local name; nil: any BigPeer node. A node advertising in the
    /// compact form (no name, BlueZ's `Name` unknown) does not match a name.
    public let name: String?
    /// The matching nodes seen and not lost, in the order they were first seen.
    public private(set) var candidates: [BLEPeer] = []
    /// The node dialled now.
    public private(set) var current: BLEPeer?
    /// The node dialled was lost from the scan, or it now advertises another address or PSM:
    /// once its link is down, dial again.
    private var currentStale = false

    public init(name: String?) { self.name = name }

    /// The URL `SyncLink` dials for `peer`: `l2cap://ADDRESS/PSM`, with `?random` for an LE random
    /// address (docs/PROTOCOL.md §2.1); nil when BlueZ's address is not six octets or the PSM is 0.
    public static func url(for peer: BLEPeer) -> String? {
        guard let address = BluetoothAddress(peer.address), peer.psm > 0 else { return nil }
        return "l2cap://\(address)/\(peer.psm)" + (peer.addressType == "random" ? "?random" : "")
    }

    /// A scanner event; `linkUp`: whether the current node's link is open now.
    public mutating func handle(_ event: BLEFinderEvent, linkUp: Bool) -> Action? {
        switch event {
        case .found(let peer), .updated(let peer):
            guard matches(peer) else { return remove(peer.devicePath, linkUp: linkUp) }
            if let i = candidates.firstIndex(where: { $0.devicePath == peer.devicePath }) {
                candidates[i] = peer
            } else {
                candidates.append(peer)
            }
            guard let dialled = current else { return dialNext() }
            guard dialled.devicePath == peer.devicePath else { return nil }
            // Seen again: stale only when it moved to another URL.
            currentStale = Self.url(for: dialled) != Self.url(for: peer)
            current = peer
            return currentStale && !linkUp ? dialNext() : nil
        case .lost(let path):
            return remove(path, linkUp: linkUp)
        }
    }

    /// The current node's link went down (or is still down): dial again when its node is gone
    /// or moved; nil when the link should keep reconnecting to the same URL.
    public mutating func linkDown() -> Action? {
        guard current == nil ? !candidates.isEmpty : currentStale else { return nil }
        return dialNext()
    }

    private func matches(_ peer: BLEPeer) -> Bool {
        Self.url(for: peer) != nil && (name == nil || peer.name == name)
    }

    private mutating func remove(_ path: String, linkUp: Bool) -> Action? {
        candidates.removeAll { $0.devicePath == path }
        guard current?.devicePath == path else { return nil }
        currentStale = true
        return linkUp ? nil : dialNext()
    }

    /// The current node when it is still a candidate (its new URL), else the first candidate.
    private mutating func dialNext() -> Action? {
        let next = candidates.first { $0.devicePath == current?.devicePath } ?? candidates.first
        currentStale = false
        guard let next, let url = Self.url(for: next) else {
            let hadOne = current != nil
            current = nil
            return hadOne ? .hangUp : nil
        }
        current = next
        return .dial(next, url: url)
    }
}
