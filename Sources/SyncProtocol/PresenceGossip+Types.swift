// What the presence gossip (PresenceGossip.swift) is told about the local peer and its links, and
// its errors.

import Values

extension PresenceGossip {
    /// What the local peer says about itself.
    public struct LocalInfo: Sendable, Equatable {
        public var deviceName: String
        public var os: String
        public var sdkVersion: String
        public var isConnectedToBigPeer = false
        public var metadata: [String: Value] = [:]
        public var identityMetadata: [String: Value] = [:]

        public init(deviceName: String, os: String = PresenceGossip.defaultOS, sdkVersion: String = PresenceGossip.sdkVersion,
                    isConnectedToBigPeer: Bool = false, metadata: [String: Value] = [:], identityMetadata: [String: Value] = [:]) {
            self.deviceName = deviceName
            self.os = os
            self.sdkVersion = sdkVersion
            self.isConnectedToBigPeer = isConnectedToBigPeer
            self.metadata = metadata
            self.identityMetadata = identityMetadata
        }
    }

    public static let sdkVersion = "bigpeer-1"
    #if os(Linux)
    public static let defaultOS = "Linux"
    #elseif os(macOS)
    public static let defaultOS = "macOS"
    #else
    public static let defaultOS = "unknown"
    #endif

    public enum Failure: Error, Sendable, Equatable, CustomStringConvertible {
        case metadataTooLarge(bytes: Int, limit: Int)
        public var description: String {
            switch self {
            case .metadataTooLarge(let b, let l): "presence metadata of \(b) bytes exceeds the limit of \(l)"
            }
        }
    }
}

/// What a link's handshake says about the peer at its other end (`hello`: name and metadata),
/// and what its login's identity service says about it.
public struct DirectPeer: Sendable, Equatable {
    public var deviceName: String
    public var metadata: [String: Value]
    /// The `identityServiceMetadata` of the peer's login (a server's authentication webhook): it
    /// replaces the `idmeta` of the peer's own records (`PresenceGossip.identify`). nil: none known.
    public var identityMetadata: [String: Value]?
    public init(deviceName: String, metadata: [String: Value] = [:], identityMetadata: [String: Value]? = nil) {
        self.deviceName = deviceName
        self.metadata = metadata
        self.identityMetadata = identityMetadata
    }
}
