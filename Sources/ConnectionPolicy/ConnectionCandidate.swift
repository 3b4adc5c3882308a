// The connection policy (docs/LOCAL-NODE.md, "Connection policy"): every incoming link — a sync
// WebSocket, a LAN TCP link, a BLE link — is described as a `ConnectionCandidate` once its
// credentials check out, and `PeerPolicy.decide` says whether it may sync.

import SyncProtocol
import Values

/// A peer asking to sync, as the policy sees it: what it said about itself in `hello`, where it
/// came from, and who its credentials say it is.
public struct ConnectionCandidate: Sendable, Equatable {
    /// `hello.key`.
    public var peerKey: [UInt8]
    /// `hello.name`.
    public var deviceName: String
    /// `hello.meta`.
    public var metadata: [String: Value]
    public var link: LinkType
    /// `host:port` (or a BLE address); "-" when unknown.
    public var remoteAddress: String
    /// The identity the credentials established: an API key id, `jwt:<sub>`; nil for none
    /// (`--insecure-dev`).
    public var principal: String?

    public init(peerKey: [UInt8], deviceName: String, metadata: [String: Value] = [:], link: LinkType,
                remoteAddress: String, principal: String?) {
        self.peerKey = peerKey
        self.deviceName = deviceName
        self.metadata = metadata
        self.link = link
        self.remoteAddress = remoteAddress
        self.principal = principal
    }

    /// A sync peer's `hello`, once its credentials established `principal`.
    public init(hello: Hello, link: LinkType, remoteAddress: String, principal: String?) {
        self.init(peerKey: hello.peerKey, deviceName: hello.deviceName, metadata: hello.metadata, link: link,
                  remoteAddress: remoteAddress, principal: principal)
    }

    /// The peer key as lower-case hex, as rules and the webhook spell it.
    public var peerKeyHex: String { Hex.encode(peerKey) }
}

/// What the policy decided.
public enum ConnectionDecision: Sendable, Equatable {
    case allow
    /// `reason` is told to the peer; it should not try again before `retryAfterSeconds`
    /// (`SyncProtocol.RetryHint` puts both in a `refuse` reason).
    case deny(reason: String, retryAfterSeconds: UInt32)
}

/// A decision and where it came from, for the server's log (the peer sees only the decision).
public struct PolicyVerdict: Sendable, Equatable {
    public var decision: ConnectionDecision
    /// `rule N (name)`, `default`, `webhook`, or `none` (no policy configured).
    public var source: String
    /// Why a webhook call failed (timeout, status, malformed answer); nil otherwise.
    public var failure: String?

    public init(_ decision: ConnectionDecision, source: String, failure: String? = nil) {
        self.decision = decision
        self.source = source
        self.failure = failure
    }
}

enum Hex {
    static let digits = Array("0123456789abcdef".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count * 2)
        for b in bytes {
            out.append(digits[Int(b >> 4)])
            out.append(digits[Int(b & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// nil unless `text` is an even number of hex digits (either case).
    static func decode(_ text: String) -> [UInt8]? {
        let utf8 = Array(text.utf8)
        guard utf8.count % 2 == 0 else { return nil }
        var out: [UInt8] = []
        out.reserveCapacity(utf8.count / 2)
        var i = 0
        while i < utf8.count {
            guard let hi = nibble(utf8[i]), let lo = nibble(utf8[i + 1]) else { return nil }
            out.append(hi << 4 | lo)
            i += 2
        }
        return out
    }

    static func nibble(_ c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
