// The identifiers a phone SDK needs to find a BigPeer node over BLE (docs/PROTOCOL.md, "BLE
// discovery"). Fixed forever: changing one makes every deployed app blind to new nodes.

public enum BigPeerBLE {
    /// The BigPeer service: advertised in the service UUID list and as the key of the service data
    /// that carries the PSM; the primary GATT service holding the PSM characteristic.
    public static let serviceUUID = "85abd6f2-a730-4a82-93d1-872918565b3d"
    /// The L2CAP PSM characteristic: the UUID Apple defines for this purpose
    /// (`CBUUIDL2CAPPSMCharacteristicString`), so CoreBluetooth code written for
    /// `publishL2CAPChannel` peers reads ours unchanged. Value: the PSM, UInt16 little-endian.
    public static let psmCharacteristicUUID = "abdd3056-28fa-441d-a470-55a75a52553a"

    /// The PSM as the characteristic and the service data carry it.
    public static func psmBytes(_ psm: UInt16) -> [UInt8] { [UInt8(psm & 0xFF), UInt8(psm >> 8)] }

    /// The PSM from those two bytes; nil for any other length (a future, longer layout is
    /// recognised by its length, not misread).
    public static func psm(from bytes: [UInt8]) -> UInt16? {
        guard bytes.count == 2 else { return nil }
        return UInt16(bytes[0]) | UInt16(bytes[1]) << 8
    }
}

/// BLE cannot be used on this machine; the caller logs it once and runs on without BLE.
public struct BLEUnavailable: Error, Equatable, Sendable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "BLE unavailable: \(reason)" }
}
