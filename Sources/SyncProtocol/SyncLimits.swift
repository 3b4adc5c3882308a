/// Bounds on what a peer may send (PROTOCOL.md §8). Every one is checked before the thing it bounds
/// is kept, so nothing a peer sends can size an allocation beyond them.
public struct SyncLimits: Sendable, Equatable {
    /// Largest message accepted (`welcome.max`).
    public var maxMessageSize = 16 << 20
    /// Largest first message a peer may send (its `hello`), on every link a server or a node
    /// accepts: until it has said who it is, a peer can make the server hold this much, not
    /// `maxMessageSize`. A hello's fields are bounded far below it (credentials and metadata
    /// 16 KiB each, name 256 B, key 256 B).
    public var maxHelloBytes = 64 << 10
    /// Smallest `hello.max` / `hello.credit` a peer may announce.
    public var minPeerWindow: UInt64 = 64 << 10
    public var maxSubscriptions = 256
    public var maxQueryBytes = 64 << 10
    public var maxArgumentsBytes = 1 << 20
    public var maxWantDocuments = 1000
    public var maxUploadDocuments = 10_000
    public var maxMetadataEntries = 64
    public var maxMetadataBytes = 16 << 10
    public var maxCredentialBytes = 16 << 10
    public var maxDeviceNameBytes = 256
    public var maxPeerKeyBytes = 256
    public var maxCollectionBytes = 1024
    public var maxValueDepth = 32
    public var maxReasonBytes = 123
    /// Presence (PROTOCOL.md §4.14): records per `presence` message, links per record, hops a
    /// record may travel, encoded size of its `meta` and of its `idmeta`, its `os` and `sdk` texts.
    public var maxPresenceRecords = 64
    public var maxPresenceLinks = 256
    public var maxPresenceHops = 16
    public var maxPresenceMetadataBytes = 4 << 10
    public var maxPresenceTextBytes = 64
    /// Credit outstanding in one direction may not exceed this (PROTOCOL.md §6).
    public var maxOutstandingCredit: Int64 = 1 << 40

    public init() {}

    public static let `default` = SyncLimits()

    /// `reason` cut to `maxReasonBytes` (what a `bye`/`refuse` and a WebSocket close frame hold),
    /// between characters.
    public func closeReason(_ reason: String) -> String { Self.prefix(reason, utf8Bytes: maxReasonBytes) }

    /// The longest prefix of `s` of at most `utf8Bytes` bytes that ends between characters.
    public static func prefix(_ s: String, utf8Bytes: Int) -> String {
        guard s.utf8.count > utf8Bytes else { return s }
        var out = "", bytes = 0
        for ch in s {
            bytes += ch.utf8.count
            if bytes > utf8Bytes { break }
            out.append(ch)
        }
        return out
    }
}
