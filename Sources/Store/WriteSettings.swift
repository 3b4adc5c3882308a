import DQL
import Postgres
import Synchronization
import Values

/// `DQL_STRICT_MODE` as write transactions see it, without a round trip of its own.
///
/// A write transaction needs strict mode before it can compute anything (it decides the CRDT type
/// of new object fields). Reading `bigpeer_settings` costs a round trip before the writes can be
/// sent; a generated-id INSERT otherwise needs none, since its upsert, the change log and COMMIT go
/// out in one pipeline. So the store remembers the stored value from the last read, and a
/// transaction that uses the remembered value sends `bigpeer_expect_setting` (migrations/0008) as
/// its first statement instead: the check runs where the read would have run (right after BEGIN,
/// in the transaction's first pipeline), and if another transaction — on any instance — changed the
/// setting, it fails with SQLSTATE `BP001` before anything is written or committed.
/// `withWriteTransaction` then forgets the value and reruns the transaction, which reads it afresh.
/// So every write uses the value strict mode had at its first statement, exactly as when every
/// transaction read it (docs/STORAGE.md, "Settings in write transactions").
struct RememberedSetting: Sendable, Equatable {
    /// The stored JSON value (nil: no row, the built-in default applies).
    var stored: Value?
}

extension DocumentStore {
    /// Strict mode for the write transaction `db`: the remembered value, checked by a held
    /// `bigpeer_expect_setting` statement; otherwise read (one round trip) and remembered.
    func strictMode(in db: PostgresPipelinedTransaction) async throws -> Bool {
        if let remembered = rememberedStrictMode.withLock({ $0 }) {
            var check: PostgresQuery
            if let stored = remembered.stored {
                check = "SELECT bigpeer_expect_setting(\(SystemSetting.strictMode.rawValue), \(PostgresJSON(JSON.string(stored)))::jsonb)"
            } else {
                check = "SELECT bigpeer_expect_setting(\(SystemSetting.strictMode.rawValue), NULL)"
            }
            check.prepared = true
            try await db.enqueue(check)
            return Self.strictMode(remembered.stored)
        }
        let stored = try Self.decodeSettings(try await db.query(Self.settingsQuery))[SystemSetting.strictMode.rawValue]
        // A read of committed state: safe to remember even if this transaction rolls back. A value
        // that is stale by the time another transaction uses it only costs that one a rerun.
        rememberedStrictMode.withLock { $0 = RememberedSetting(stored: stored) }
        return Self.strictMode(stored)
    }

    static func strictMode(_ stored: Value?) -> Bool { stored?.boolValue ?? true }

    /// Forgets the remembered strict mode (after a `BP001`, or after this instance changed settings).
    func forgetRememberedSettings() {
        rememberedStrictMode.withLock { $0 = nil }
    }
}

extension PostgresError {
    /// `bigpeer_expect_setting` found a setting changed (SQLSTATE BP001, migrations/0008): the
    /// transaction wrote nothing; rerun it with the setting read afresh.
    var isSettingChanged: Bool {
        guard case .server(let e) = self else { return false }
        return e.sqlState == "BP001"
    }
}
