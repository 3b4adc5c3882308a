import Postgres

/// An attachment's id: the lowercase hex SHA-256 of its content, so equal content has one id and
/// is stored once, and a client can verify what it downloaded.
public struct AttachmentID: Hashable, Sendable, CustomStringConvertible {
    public let hex: String

    /// Accepts exactly 64 lowercase hex digits; nil for anything else.
    public init?(_ text: some StringProtocol) {
        guard text.utf8.count == 64,
              text.utf8.allSatisfy({ ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) || ($0 >= UInt8(ascii: "a") && $0 <= UInt8(ascii: "f")) })
        else { return nil }
        hex = String(text)
    }

    public var description: String { hex }
}

/// What is stored about an attachment.
public struct AttachmentInfo: Sendable, Equatable {
    public var id: AttachmentID
    public var length: Int64
    public var contentType: String?
    /// The key of the chunk rows, and the chunk size the content was cut with.
    var blob: Int64
    var chunkSize: Int64
}

/// Failures of the attachment store itself (errors of the content source pass through as thrown).
public enum AttachmentError: Error, Sendable, CustomStringConvertible {
    /// The content exceeded the limit given to `store`.
    case tooLarge(limit: Int)
    /// The database is unreachable or restarting.
    case unavailable(PostgresError)
    /// Any other database failure (logged in full by the caller).
    case database(PostgresError)
    /// Stored chunks do not match the metadata (corruption, or a row edited by hand).
    case corrupt(String)
    /// OpenSSL could not compute the digest (allocation failure).
    case digestFailed

    public var description: String {
        switch self {
        case .tooLarge(let limit): "the attachment is larger than the limit of \(limit) bytes"
        case .unavailable: "the database is unavailable; retry later"
        case .database(let e): e.description
        case .corrupt(let m): "stored attachment is unreadable: \(m)"
        case .digestFailed: "could not compute the content digest"
        }
    }

    static func wrap(_ error: any Error) -> any Error {
        guard let e = error as? PostgresError else { return error }
        return e.isUnavailable ? AttachmentError.unavailable(e) : AttachmentError.database(e)
    }
}

/// Content-addressed attachments in PostgreSQL (`migrations/0004_attachments.sql`, docs/STORAGE.md).
///
/// Writing: the content is hashed and cut into `chunkSize` rows as it arrives, inside one
/// transaction, so memory stays at one chunk whatever the size, and nothing is visible (or left
/// behind) unless the whole upload commits. The metadata row goes in last, when the hash is known;
/// if that id already exists the transaction rolls back and the existing attachment is returned.
///
/// Reading: one chunk per query (`substring` of just the requested slice), so a download or a range
/// request holds at most one chunk in memory and a database session only for one statement.
public final class AttachmentStore: Sendable {
    public let pool: PostgresPool
    public let chunkSize: Int

    public init(pool: PostgresPool, chunkSize: Int = 1 << 20) {
        self.pool = pool
        self.chunkSize = max(1, chunkSize)
    }

    public struct Stored: Sendable {
        public var info: AttachmentInfo
        /// False when identical content was already stored (nothing new was written).
        public var created: Bool
    }

    private struct AlreadyStored: Error {}

    /// Stores the content `source` yields (nil ends it), at most `maxBytes` bytes
    /// (`AttachmentError.tooLarge` beyond, with nothing stored). Durable when it returns.
    public func store(contentType: String?, maxBytes: Int, from source: () async throws -> [UInt8]?) async throws -> Stored {
        let chunkSize = self.chunkSize
        let hasher = SHA256()
        var total = 0
        var digest: AttachmentID?  // EVP_DigestFinal may run only once
        do {
            let info = try await pool.withConnection { conn in
                try await conn.transaction { conn -> AttachmentInfo in
                    let blob = try await conn.query("SELECT nextval('bigpeer_attachment_blob_seq')")[0].decode(0, as: Int64.self)
                    var pending: [UInt8] = []
                    pending.reserveCapacity(chunkSize)
                    var seq = 0
                    func flush() async throws {
                        _ = try await conn.query("INSERT INTO bigpeer_attachment_chunks (blob, seq, data) VALUES (\(blob), \(seq), \(PostgresBytea(pending)))")
                        seq += 1
                        pending.removeAll(keepingCapacity: true)
                    }
                    while let piece = try await source() {
                        total += piece.count
                        guard total <= maxBytes else { throw AttachmentError.tooLarge(limit: maxBytes) }
                        hasher.update(piece)
                        var rest = piece[...]
                        while !rest.isEmpty {
                            let take = min(chunkSize - pending.count, rest.count)
                            pending.append(contentsOf: rest.prefix(take))
                            rest = rest.dropFirst(take)
                            if pending.count == chunkSize { try await flush() }
                        }
                    }
                    if !pending.isEmpty { try await flush() }
                    guard let hex = hasher.finalHex(), let id = AttachmentID(hex) else { throw AttachmentError.digestFailed }
                    digest = id
                    let contentType = contentType.map { String($0.prefix(255)) }
                    let inserted = try await conn.query("""
                        INSERT INTO bigpeer_attachments (id, blob, length, chunk_size, content_type)
                        VALUES (\(id.hex), \(blob), \(Int64(total)), \(Int64(chunkSize)), \(contentType))
                        ON CONFLICT (id) DO NOTHING RETURNING blob
                        """)
                    guard inserted.count == 1 else { throw AlreadyStored() }  // rolls back our chunks
                    return AttachmentInfo(id: id, length: Int64(total), contentType: contentType, blob: blob, chunkSize: Int64(chunkSize))
                }
            }
            return Stored(info: info, created: true)
        } catch is AlreadyStored {
            guard let id = digest else { throw AttachmentError.digestFailed }
            guard let existing = try await info(id) else {
                throw AttachmentError.corrupt("attachment \(id) conflicted on insert but cannot be read")
            }
            return Stored(info: existing, created: false)
        } catch {
            throw AttachmentError.wrap(error)
        }
    }

    /// The attachment's metadata, or nil if there is none with this id.
    public func info(_ id: AttachmentID) async throws -> AttachmentInfo? {
        do {
            let rows = try await pool.query("SELECT blob, length, chunk_size, content_type FROM bigpeer_attachments WHERE id = \(id.hex)")
            guard let row = rows.first else { return nil }
            return AttachmentInfo(id: id, length: try row.decode(1, as: Int64.self), contentType: try row.decode(3, as: String?.self),
                                  blob: try row.decode(0, as: Int64.self), chunkSize: try row.decode(2, as: Int64.self))
        } catch {
            throw AttachmentError.wrap(error)
        }
    }

    /// Passes the bytes of `range` (within `0..<info.length`) to `sink`, one stored chunk's
    /// worth at a time, in order.
    public func read(_ info: AttachmentInfo, range: Range<Int64>, into sink: ([UInt8]) async throws -> Void) async throws {
        guard range.lowerBound >= 0, range.upperBound <= info.length, !range.isEmpty else { return }
        let size = info.chunkSize
        for seq in (range.lowerBound / size)...((range.upperBound - 1) / size) {
            let chunkStart = seq * size
            let from = max(range.lowerBound - chunkStart, 0)
            let to = min(range.upperBound - chunkStart, size)
            let bytes: [UInt8]
            do {
                // substring is 1-based (PostgreSQL string functions).
                let rows = try await pool.query("""
                    SELECT substring(data FROM \(from + 1)::integer FOR \(to - from)::integer) FROM bigpeer_attachment_chunks
                    WHERE blob = \(info.blob) AND seq = \(seq)
                    """)
                guard let row = rows.first else { throw AttachmentError.corrupt("chunk \(seq) of \(info.id) is missing") }
                bytes = try row.decode(0, as: PostgresBytea.self).bytes
            } catch {
                throw AttachmentError.wrap(error)
            }
            guard bytes.count == Int(to - from) else {
                throw AttachmentError.corrupt("chunk \(seq) of \(info.id) has \(bytes.count) bytes where \(to - from) were expected")
            }
            try await sink(bytes)
        }
    }
}
