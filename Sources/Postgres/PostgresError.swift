// Postgres: a libpq wrapper with no BigPeer knowledge — connections driven non-blocking by our epoll
// event loops, a bounded pool, typed binds and rows, transactions, LISTEN/NOTIFY, COPY, migrations,
// and a private local cluster for development and tests. See docs/ARCHITECTURE.md for who owns what.

import CLibPQ

/// What the server said when it refused a statement (an ErrorResponse).
public struct PostgresServerError: Sendable, Equatable {
    public var severity: String
    /// Five-character SQLSTATE, e.g. `23505` for a unique violation.
    public var sqlState: String
    public var message: String
    public var detail: String?
    public var hint: String?
    /// 1-based character position in the statement, when the server reports one.
    public var position: Int?
    public var constraint: String?

    init(result: OpaquePointer) {
        func field(_ code: UInt8) -> String? {
            guard let p = PQresultErrorField(result, Int32(code)) else { return nil }
            return String(cString: p)
        }
        severity = field(UInt8(ascii: "V")) ?? field(UInt8(ascii: "S")) ?? "ERROR"
        sqlState = field(UInt8(ascii: "C")) ?? "XX000"
        message = field(UInt8(ascii: "M")) ?? "unknown error"
        detail = field(UInt8(ascii: "D"))
        hint = field(UInt8(ascii: "H"))
        position = field(UInt8(ascii: "P")).flatMap { Int($0) }
        constraint = field(UInt8(ascii: "n"))
    }

    public init(severity: String = "ERROR", sqlState: String, message: String) {
        self.severity = severity
        self.sqlState = sqlState
        self.message = message
    }
}

/// Everything the Postgres layer can throw.
///
/// `description` is safe to show to a client: it never includes SQL text, server detail or hints.
/// `debugDescription` has everything (SQLSTATE, detail, hint, position) for logs.
public enum PostgresError: Error, Sendable, CustomStringConvertible, CustomDebugStringConvertible {
    /// The URL or parameters could not be parsed.
    case invalidConfiguration(String)
    /// Could not establish a session (refused, unreachable, authentication failed, TLS failed).
    case connectionFailed(String)
    /// An established session broke (server restart, network); the statement's outcome is unknown
    /// unless it was never sent.
    case connectionClosed(String)
    /// The server refused the statement.
    case server(PostgresServerError)
    /// A value in a row could not be decoded as the requested type.
    case decoding(column: String, type: String, reason: String)
    /// The pool had no free connection within the wait timeout.
    case poolTimeout(waited: Duration, maxConnections: Int)
    /// The pool or connection was shut down.
    case shutDown
    /// The server answered in a way this client did not expect.
    case protocolViolation(String)
    /// A migration problem (changed checksum, unreadable file, bad name).
    case migration(String)
    /// The local development cluster could not be set up or started.
    case localCluster(String)

    public var sqlState: String? {
        if case .server(let e) = self { e.sqlState } else { nil }
    }

    /// True when retrying the whole transaction may succeed (serialization failure, deadlock).
    public var isTransient: Bool {
        sqlState == "40001" || sqlState == "40P01"
    }

    /// True when the database could not be reached at all (callers map it to 503).
    public var isUnavailable: Bool {
        switch self {
        case .connectionFailed, .connectionClosed, .poolTimeout, .shutDown: return true
        case .server(let e):
            // 57P01-03: admin shutdown, crash shutdown, cannot connect now; 08xxx connection exceptions.
            return e.sqlState.hasPrefix("57P") || e.sqlState.hasPrefix("08") || e.sqlState == "53300"
        default: return false
        }
    }

    public var description: String {
        switch self {
        case .invalidConfiguration(let m): "invalid database configuration: \(m)"
        case .connectionFailed: "could not connect to the database"
        case .connectionClosed: "the database connection was lost"
        case .server(let e): "database error \(e.sqlState)"
        case .decoding(let c, let t, _): "could not decode column \(c) as \(t)"
        case .poolTimeout(let w, _): "no database connection available within \(w)"
        case .shutDown: "the database layer is shut down"
        case .protocolViolation: "unexpected answer from the database"
        case .migration(let m): "migration failed: \(m)"
        case .localCluster(let m): "local PostgreSQL: \(m)"
        }
    }

    public var debugDescription: String {
        switch self {
        case .connectionFailed(let m): "could not connect to the database: \(m)"
        case .connectionClosed(let m): "the database connection was lost: \(m)"
        case .server(let e):
            "\(e.severity) \(e.sqlState): \(e.message)"
                + (e.detail.map { " DETAIL: \($0)" } ?? "")
                + (e.hint.map { " HINT: \($0)" } ?? "")
                + (e.position.map { " (at character \($0))" } ?? "")
        case .decoding(let c, let t, let r): "could not decode column \(c) as \(t): \(r)"
        case .poolTimeout(let w, let n): "no database connection available within \(w) (pool of \(n))"
        case .protocolViolation(let m): "unexpected answer from the database: \(m)"
        default: description
        }
    }
}
