import DQL
import Glibc
import Postgres
import Values

/// One API key as stored (never the key itself: see `APIKeyToken`).
public struct APIKey: Sendable, Hashable {
    public var id: String
    public var description: String
    public var createdAt: PostgresTimestamp
    public var expiresAt: PostgresTimestamp
    public var revokedAt: PostgresTimestamp?
    public var read: CollectionScope
    public var write: CollectionScope
    public var lastUsedAt: PostgresTimestamp?
    /// Per-document read rules (docs/AUTH.md, "Rules"); `.none` for a key without them.
    public var readRules: DocumentRules = .none
    /// Per-document write rules (docs/AUTH.md, "Write rules"); `.none` for a key without them.
    public var writeRules: DocumentRules = .none
    /// May download any attachment by id, referenced by a readable document or not
    /// (`read_attachments`, migrations/0014_attachment_refs.sql).
    public var readAttachments = false
    /// The key's own share of the server's time (`keys create --time-limit`, docs/AUTH.md,
    /// "Server time"); nil: the server's `--time-limit-credential`, if any.
    public var timeLimit: TokenBucketRate?

    /// Why this key cannot be used at `now`, if it cannot.
    public func refusal(at now: PostgresTimestamp) -> AuthError? {
        if revokedAt != nil { return .revokedKey }
        if expiresAt <= now { return .expiredKey }
        return nil
    }
}

/// The `api_keys` table (migrations/0003_api_keys.sql): create, list, revoke, look up by id.
public struct APIKeyStore: Sendable {
    public let pool: PostgresPool

    public init(pool: PostgresPool) { self.pool = pool }

    /// Longest description accepted (the column's CHECK allows the same).
    public static let maxDescriptionLength = 1000
    /// The largest rate and burst of a key's time limit (migrations/0016_api_key_time_limit.sql).
    public static let maxTimeLimit = 1_000_000.0

    /// Creates a key; the returned token is the only copy of the key text anywhere. Each of
    /// `readRules` also adds its collection to `read`, each of `writeRules` to `write` (a rule is
    /// a scope narrowed to documents).
    public func create(description: String, expiresAt: PostgresTimestamp, read: CollectionScope, write: CollectionScope,
                       readRules: [DocumentRule] = [], writeRules: [DocumentRule] = [], readAttachments: Bool = false,
                       timeLimit: TokenBucketRate? = nil) async throws -> (APIKey, APIKeyToken) {
        guard description.count <= Self.maxDescriptionLength else {
            throw APIKeyStoreError.invalid("the description is longer than \(Self.maxDescriptionLength) characters")
        }
        for scope in [read, write] {
            if let bad = scope.invalidName {
                throw APIKeyStoreError.invalid("collection name \"\(bad.name)\" \(bad.problem)")
            }
        }
        if let timeLimit, timeLimit.perSecond > Self.maxTimeLimit || timeLimit.burst > Self.maxTimeLimit {
            throw APIKeyStoreError.invalid("a time limit's rate and burst are at most \(Int(Self.maxTimeLimit)) seconds")
        }
        guard readRules.count + writeRules.count <= DocumentRule.maxRulesPerCredential else {
            throw APIKeyStoreError.invalid("at most \(DocumentRule.maxRulesPerCredential) rules per key")
        }
        for rule in readRules + writeRules where rule.usesClaims {
            throw APIKeyStoreError.invalid("the rule for \(rule.collection) uses :claims, but an API key has no claims (it would match no document)")
        }
        let token = try APIKeyToken.generate()
        let (readAll, readList) = Self.columns(Self.widened(read, by: readRules))
        let (writeAll, writeList) = Self.columns(Self.widened(write, by: writeRules))
        let rows = try await pool.query("""
            INSERT INTO api_keys (id, key_sha256, description, expires_at, read_all, read_collections, write_all, write_collections,
                                  read_rules, write_rules, read_attachments, time_limit_rate, time_limit_burst)
            VALUES (\(token.id), \(PostgresBytea(token.sha256)), \(description), \(expiresAt), \(readAll), \(readList), \(writeAll), \(writeList),
                    \(Self.rulesJSON(readRules))::jsonb, \(Self.rulesJSON(writeRules))::jsonb, \(readAttachments),
                    \(timeLimit?.perSecond), \(timeLimit?.burst))
            RETURNING \(unsafeRaw: Self.columnList)
            """)
        return (try Self.decode(rows[0]), token)
    }

    /// Every key, newest first.
    public func list() async throws -> [APIKey] {
        let rows = try await pool.query("SELECT \(unsafeRaw: Self.columnList) FROM api_keys ORDER BY created_at DESC, id")
        return try rows.map(Self.decode)
    }

    /// Marks a key revoked (keeps the row for audit). False when no such key; revoking twice keeps
    /// the first revocation time.
    @discardableResult
    public func revoke(id: String) async throws -> Bool {
        let rows = try await pool.query("UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = \(id) RETURNING id")
        return !rows.isEmpty
    }

    /// The key and its stored hash, for verification.
    func lookup(id: String) async throws -> (APIKey, [UInt8])? {
        let rows = try await pool.query("SELECT \(unsafeRaw: Self.columnList), key_sha256 FROM api_keys WHERE id = \(id)")
        guard let row = rows.first else { return nil }
        return (try Self.decode(row), try row.decode(15, as: PostgresBytea.self).bytes)
    }

    /// `scope` with the collections `rules` name added (a rule grants its collection, narrowed).
    static func widened(_ scope: CollectionScope, by rules: [DocumentRule]) -> CollectionScope {
        guard case .only(let names) = scope else { return scope }
        return .only(names.union(rules.map(\.collection)))
    }

    /// `{"orders": ["site = 'A'", …]}`: the stored form of rules (Ditto's `queriesByCollection`).
    static func rulesJSON(_ rules: [DocumentRule]) -> String {
        var byCollection: [String: [Value]] = [:]
        for rule in rules { byCollection[rule.collection, default: []].append(.string(rule.text)) }
        return JSON.string(.object(byCollection.mapValues(Value.array)))
    }

    /// Records a use (called at most once per cache period per key, not per request).
    func touch(id: String) async throws {
        _ = try await pool.query("UPDATE api_keys SET last_used_at = now() WHERE id = \(id)")
    }

    static let columnList = "id, description, created_at, expires_at, revoked_at, read_all, read_collections, write_all, write_collections, "
        + "last_used_at, read_rules::text, write_rules::text, read_attachments, time_limit_rate, time_limit_burst"

    static func decode(_ row: PostgresRow) throws -> APIKey {
        func scope(_ all: Int, _ list: Int) throws -> CollectionScope {
            // A name that is not NFC (stored before names were checked) could only ever match by
            // Unicode equivalence, which is what must not happen: it covers nothing.
            try row.decode(all, as: Bool.self) ? .all : .only(Set(try row.decode(list, as: [String].self).filter { NameRules.problem($0) == nil }))
        }
        return APIKey(
            id: try row.decode(0, as: String.self), description: try row.decode(1, as: String.self),
            createdAt: try row.decode(2, as: PostgresTimestamp.self), expiresAt: try row.decode(3, as: PostgresTimestamp.self),
            revokedAt: try row.decode(4, as: PostgresTimestamp?.self),
            read: try scope(5, 6), write: try scope(7, 8),
            lastUsedAt: try row.decode(9, as: PostgresTimestamp?.self),
            readRules: rules(try row.decode(10, as: String.self)), writeRules: rules(try row.decode(11, as: String.self)),
            readAttachments: try row.decode(12, as: Bool.self),
            timeLimit: try row.decode(13, as: Double?.self).flatMap { rate in
                try row.decode(14, as: Double?.self).flatMap { TokenBucketRate(perSecond: rate, burst: $0) }
            })
    }

    /// Stored `read_rules` or `write_rules` parsed. A rule that no longer parses (stored by another
    /// version) becomes FALSE for its collection: the key then sees (or may change) nothing there
    /// rather than everything.
    static func rules(_ json: String) -> DocumentRules {
        var rules = DocumentRules()
        guard case .object(let byCollection)? = try? JSON.parse(json) else { return rules }
        for (collection, texts) in byCollection.sorted(by: { $0.key < $1.key }) {
            guard case .array(let items) = texts else {
                rules.add(collection: collection, text: "(not a list of rules)", condition: .literal(.bool(false)))
                continue
            }
            for case .string(let text) in items {
                let condition = (try? DocumentRule.parse(collection: collection, condition: text).resolved(claims: [:])) ?? .literal(.bool(false))
                rules.add(collection: collection, text: text, condition: condition)
            }
        }
        return rules
    }

    static func columns(_ scope: CollectionScope) -> (Bool, [String]) {
        switch scope {
        case .all: (true, [])
        case .only(let set): (false, set.sorted())
        }
    }

    /// The wall clock as a PostgreSQL timestamp (expiry is wall-clock time).
    public static func now() -> PostgresTimestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return PostgresTimestamp(microsecondsSince1970: Int64(ts.tv_sec) * 1_000_000 + Int64(ts.tv_nsec) / 1000)
    }
}

/// Errors of key management (the CLI prints them).
public enum APIKeyStoreError: Error, Sendable, CustomStringConvertible {
    case invalid(String)
    public var description: String {
        switch self {
        case .invalid(let m): m
        }
    }
}
