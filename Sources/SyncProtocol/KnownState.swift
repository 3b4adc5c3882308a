import COpenSSL

/// A document the peer already has, named by its `DocumentHash`, with the `StateDigest` of the
/// state it has: what a `sub` without `cp` lists in `known` (PROTOCOL.md §4.3), so that the initial
/// sync skips documents whose state the peer has exactly.
public struct KnownState: Sendable, Hashable, Comparable {
    public var document: UInt64
    public var state: UInt64

    public init(document: UInt64, state: UInt64) {
        self.document = document
        self.state = state
    }

    public static func < (a: KnownState, b: KnownState) -> Bool { a.document < b.document }

    /// Bytes of one entry on the wire: the document hash, then the state digest, both big-endian.
    public static let encodedSize = 16
}

/// The 64-bit digest of a document's stored CRDT state: the first 8 bytes of SHA-256 over the state
/// bytes, big-endian (PostgreSQL: `substring(sha256(state) from 1 for 8)`). A state is canonical
/// CBOR (docs/CRDT.md), so two replicas holding the same document state hold the same bytes.
///
/// Why SHA-256 and not FNV like `DocumentHash`: a writer who could make a document's new state
/// collide with its old one would leave peers that hold the old one stale until the next change.
/// Finding a second state with a given 64-bit SHA-256 prefix takes about 2^64 attempts.
public enum StateDigest {
    public static func of(_ state: [UInt8]) -> UInt64 {
        var digest = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 0
        let ok = state.withUnsafeBufferPointer { input in
            digest.withUnsafeMutableBufferPointer { out in
                EVP_Digest(input.baseAddress, input.count, out.baseAddress, &length, EVP_sha256(), nil)
            }
        }
        // EVP_Digest with a built-in digest fails only on allocation failure; 0 then names no
        // state the peer could claim to have with any likelihood, so the document is just sent.
        guard ok == 1 else { return 0 }
        return digest.prefix(8).reduce(0) { $0 << 8 | UInt64($1) }
    }
}
