// Store: the document store on PostgreSQL — CRDT state plus materialized JSONB per document,
// DQL execution (pushdown + in-memory residual), group-committed writes, the change log, and the
// transaction counter. Schema: migrations/0002_documents.sql, described in docs/STORAGE.md.

import CRDT
import DQL
import Postgres

/// Everything `DocumentStore.execute` can throw: what went wrong and whose fault it is (the REST
/// API maps each case to a status in BigPeerServer's `APIError`).
public enum StoreError: Error, Sendable, CustomStringConvertible {
    /// The statement does not parse (line and column in the message).
    case syntax(DQLSyntaxError)
    /// The statement parses but cannot run (bad arguments, types, paths, limits).
    case invalid(String)
    /// INSERT with ON ID CONFLICT FAIL (the default) found the document; CREATE INDEX of an existing index.
    case conflict(String)
    /// The statement names something that does not exist (DROP INDEX of a missing index).
    case notFound(String)
    /// A document would exceed the size limit.
    case tooLarge(String)
    /// The caller's write rules do not allow the change (docs/AUTH.md, "Write rules"): the message
    /// names the collection, never the document's content; the refusal names the documents and
    /// the rules for the audit log (never for the client).
    case forbidden(WriteRuleRefusal)
    /// A read's result would need more memory than `ReadLimits.maxBufferedResultBytes` (the
    /// caller's to fix: the statement, not the request body, must change).
    case resultTooLarge(String)
    /// The requested transaction number was never reached.
    case unknownTransaction(Int64)
    /// The statement ran longer than allowed (nil: PostgreSQL cancelled it; else what ran out).
    case timeout(String?)
    /// The server is at a capacity limit (e.g. `ReadLimits.maxConcurrentStreams`): retry later.
    case busy(String)
    /// The database is unreachable or restarting.
    case unavailable(PostgresError)
    /// A database error that is not the caller's fault (logged in full; clients see the SQLSTATE only).
    case database(PostgresError)
    /// Stored data could not be decoded (corruption or a newer format).
    case corrupt(String)

    public var description: String {
        switch self {
        case .syntax(let e): "syntax error at \(e.location.line):\(e.location.column): expected \(e.expected), found \(e.found)"
        case .invalid(let m): m
        case .conflict(let m): m
        case .notFound(let m): m
        case .tooLarge(let m): m
        case .forbidden(let r): r.description
        case .resultTooLarge(let m): m
        case .busy(let m): m
        case .unknownTransaction(let n): "transaction \(n) has not been reached"
        case .timeout(let what): what ?? "the statement timed out"
        case .unavailable: "the database is unavailable; retry later"
        case .database(let e): e.description
        case .corrupt(let m): "stored document could not be read: \(m)"
        }
    }

    static func from(_ error: any Error) -> StoreError {
        switch error {
        case let e as StoreError: return e
        case let e as DQLSyntaxError: return .syntax(e)
        case let e as DQLEvaluationError:
            switch e {
            case .limitExceeded(let m): return .tooLarge(m)
            case .deadlineExceeded: return .timeout(e.description)
            default: return .invalid(e.description)
            }
        case let e as CRDTError: return .invalid(e.description)
        case let e as DocumentMutationError:
            switch e {
            case .conflict: return .conflict(e.description)
            case .tooLarge(let m): return .tooLarge(m)
            case .invalid(let evaluation): return from(evaluation)
            case .crdt(let crdt): return .invalid(crdt.description)
            }
        case let e as PostgresError:
            if e.isUnavailable { return .unavailable(e) }
            if e.sqlState == "57014" { return .timeout(nil) }  // statement_timeout
            // jsonb and text cannot hold U+0000 (22P05) or invalid characters (22021): the input's fault.
            switch e.sqlState {
            case "22P05", "22021":
                return .invalid("text containing U+0000 (NUL) or characters invalid in UTF-8 cannot be stored or compared")
            case "54023":  // too_many_arguments: more than 65,535 binds (refused before sending)
                return .invalid("the statement needs more than 65,535 parameters; split it into smaller statements")
            case "54000":  // program_limit_exceeded: a value over 1 GB, an index row too large
                return .tooLarge("a value is larger than PostgreSQL can store or index")
            case "54001":  // statement_too_complex (stack depth)
                return .invalid("the statement is nested too deeply")
            default:
                // Class 22, data exception (a value out of range, a bad cast of a value, ...):
                // always about a value the caller sent or stored, so the caller's error.
                if let state = e.sqlState, state.hasPrefix("22"), case .server(let server) = e {
                    return .invalid("PostgreSQL refused a value: \(server.message) (SQLSTATE \(state))")
                }
            }
            return .database(e)
        default: return .invalid("\(error)")
        }
    }
}
