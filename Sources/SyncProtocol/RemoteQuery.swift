// Remote queries (PROTOCOL.md §4.15): the server asks a peer to run a DQL SELECT on its local
// store (`query`, S -> C) and the peer answers once (`result`, C -> S). The server sends `query`
// only to peers that announced the `query` capability in `hello.caps` (§4.1), so a peer that
// predates the message never receives one.
//
//   query  = { "q", "t": "query", "id", "ms", "max", ? "args" }          (canonical key order)
//   result = { "t": "result", "id", "ms", ? "err": {"msg", "code"}, ? "warn", ? "items" }
//            exactly one of "err" and "items"

import Values

/// Names a peer lists in `hello.caps` (PROTOCOL.md §4.1).
public enum SyncCapability {
    /// The peer understands `query` and answers each with one `result` (§4.15).
    public static let remoteQuery = "query"
    /// The peer can resume its session on another link (`rack`, `hello.resume`; §4.16).
    public static let resume = "resume"
    /// The peer wants `renew` before its credentials expire, and answers it with `auth` (§4.13).
    public static let renew = "renew"
    /// The peer understands `gone`: the server's answer to `want` for a document it has no row for,
    /// or one the peer's read rules hide (§4.7).
    public static let gone = "gone"
}

/// The server's `query`: run `statement` (a DQL SELECT) on the peer's local store.
public struct RemoteQuery: Sendable, Equatable {
    /// Chosen by the server, unique among its queries outstanding on the session.
    public var id: UInt32
    public var statement: String
    public var arguments: [String: Value]
    /// How long the server waits for the answer: a peer may give up evaluating after it.
    public var timeoutMillis: UInt64
    /// The largest `result` message (encoded bytes) the server accepts for this query: the peer
    /// drops items from the end to fit, and says so in a warning (`RemoteQueryResult.fitting`).
    public var maxResultBytes: UInt64

    /// The smallest `max` a `query` may carry: room for an error or a truncation warning.
    public static let minResultBytes: UInt64 = 1024

    public init(id: UInt32, statement: String, arguments: [String: Value] = [:], timeoutMillis: UInt64, maxResultBytes: UInt64) {
        self.id = id
        self.statement = statement
        self.arguments = arguments
        self.timeoutMillis = timeoutMillis
        self.maxResultBytes = maxResultBytes
    }
}

/// Why a remote query has no items: sent by the peer (`result.err`) or decided by the server
/// (no answer in time, the session ended, ...). `code` is text on the wire so a newer peer's
/// codes pass through (`other`).
public struct RemoteQueryError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Code: Sendable, Equatable {
        /// The peer does not allow remote queries.
        case notAllowed
        /// Not a SELECT, or not valid DQL.
        case invalidQuery
        /// The evaluation failed (bad argument, budget exhausted, local store error).
        case failed
        /// No answer within the timeout (server).
        case timeout
        /// The session ended before the answer (server).
        case sessionClosed
        /// The peer did not announce the `query` capability (server).
        case unsupported
        /// The session has its maximum of queries outstanding (server).
        case busy
        /// The answer was larger than the query's `max` (server).
        case tooLarge
        case other(String)

        public init(wire: String) {
            switch wire {
            case "not_allowed": self = .notAllowed
            case "invalid_query": self = .invalidQuery
            case "failed": self = .failed
            case "timeout": self = .timeout
            case "session_closed": self = .sessionClosed
            case "unsupported": self = .unsupported
            case "busy": self = .busy
            case "too_large": self = .tooLarge
            default: self = .other(wire)
            }
        }

        public var wire: String {
            switch self {
            case .notAllowed: "not_allowed"
            case .invalidQuery: "invalid_query"
            case .failed: "failed"
            case .timeout: "timeout"
            case .sessionClosed: "session_closed"
            case .unsupported: "unsupported"
            case .busy: "busy"
            case .tooLarge: "too_large"
            case .other(let s): s
            }
        }
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { "\(code.wire): \(message)" }

    public static let notAllowedByPeer = RemoteQueryError(.notAllowed, "remote queries are not allowed by this peer")
}

/// The peer's `result` (or the server's stand-in for one that did not come).
public struct RemoteQueryResult: Sendable, Equatable {
    public var id: UInt32
    public var outcome: Result<[Value], RemoteQueryError>
    public var warnings: [String]
    /// How long the peer took, from receiving `query` to sending `result`.
    public var elapsedMillis: UInt64

    public init(id: UInt32, outcome: Result<[Value], RemoteQueryError>, warnings: [String] = [], elapsedMillis: UInt64 = 0) {
        self.id = id
        self.outcome = outcome
        self.warnings = warnings
        self.elapsedMillis = elapsedMillis
    }

    /// Bounds on `result.warn` and `result.err` (PROTOCOL.md §8).
    public static let maxWarnings = 16
    public static let maxWarningBytes = 1024
    public static let maxErrorMessageBytes = 4096
    public static let maxErrorCodeBytes = 64

    /// This result cut to an encoded `result` message of at most `maxBytes`: items are dropped from
    /// the end, and a warning says how many were kept. Warnings and an error message are cut to
    /// their wire bounds first.
    public func fitting(maxBytes: UInt64) -> RemoteQueryResult {
        var r = self
        r.warnings = Array(warnings.prefix(Self.maxWarnings - 1)).map { SyncLimits.prefix($0, utf8Bytes: Self.maxWarningBytes) }
        if case .failure(let e) = outcome {
            r.outcome = .failure(RemoteQueryError(e.code, SyncLimits.prefix(e.message, utf8Bytes: min(Self.maxErrorMessageBytes, Int(clamping: maxBytes / 2)))))
        }
        guard case .success(let items) = r.outcome, SyncMessage.result(r).encode().count > maxBytes else { return r }
        var note = r
        note.outcome = .success([])
        note.warnings.append(Self.truncationWarning(kept: items.count, of: items.count, maxBytes: maxBytes))
        // The envelope with the longest warning it can get, plus the largest array head.
        var room = Int(clamping: maxBytes) - SyncMessage.result(note).encode().count - 8
        var kept = 0
        for item in items {
            room -= CBORValueCodec.encode(item).count
            if room < 0 { break }
            kept += 1
        }
        r.outcome = .success(Array(items.prefix(kept)))
        r.warnings.append(Self.truncationWarning(kept: kept, of: items.count, maxBytes: maxBytes))
        return r
    }

    static func truncationWarning(kept: Int, of total: Int, maxBytes: UInt64) -> String {
        "result truncated to \(kept) of \(total) items (the server accepts at most \(maxBytes) bytes)"
    }
}

// MARK: - Codec

extension CBORWriter {
    mutating func write(query q: RemoteQuery) {
        // q, t, id, ms, max, args
        mapHeader(q.arguments.isEmpty ? 5 : 6)
        text("q"); text(q.statement)
        text("t"); text("query")
        text("id"); unsigned(UInt64(q.id))
        text("ms"); unsigned(q.timeoutMillis)
        text("max"); unsigned(q.maxResultBytes)
        if !q.arguments.isEmpty { text("args"); value(.object(q.arguments)) }
    }

    mutating func write(result r: RemoteQueryResult) {
        // t, id, ms, err, warn, items
        mapHeader(4 + (r.warnings.isEmpty ? 0 : 1))
        text("t"); text("result")
        text("id"); unsigned(UInt64(r.id))
        text("ms"); unsigned(r.elapsedMillis)
        if case .failure(let e) = r.outcome {
            text("err")
            mapHeader(2)
            text("msg"); text(e.message)
            text("code"); text(e.code.wire)
        }
        if !r.warnings.isEmpty {
            text("warn")
            arrayHeader(r.warnings.count)
            for w in r.warnings { text(w) }
        }
        if case .success(let items) = r.outcome {
            text("items")
            arrayHeader(items.count)
            for v in items { value(v) }
        }
    }
}

extension Fields {
    func remoteQuery() throws(E) -> RemoteQuery {
        var arguments: [String: Value] = [:]
        if let args = items["args"] {
            guard args.size <= limits.maxArgumentsBytes else {
                throw .outOfRange(type: type, field: "args", reason: "larger than \(limits.maxArgumentsBytes) bytes")
            }
            arguments = try object("args", depth: limits.maxValueDepth)
        }
        let max = try uint("max")
        guard max >= RemoteQuery.minResultBytes else {
            throw .outOfRange(type: type, field: "max", reason: "at least \(RemoteQuery.minResultBytes) bytes")
        }
        return RemoteQuery(id: try subID("id"), statement: try text("q", max: limits.maxQueryBytes, min: 1), arguments: arguments,
                           timeoutMillis: try uint("ms"), maxResultBytes: max)
    }

    func remoteQueryResult() throws(E) -> RemoteQueryResult {
        typealias R = RemoteQueryResult
        var warnings: [String] = []
        if items["warn"] != nil {
            let list = try array("warn", minCount: 1)
            guard list.count <= R.maxWarnings else { throw .outOfRange(type: type, field: "warn", reason: "at most \(R.maxWarnings) warnings") }
            for w in list {
                guard case .text(let s) = w, s.utf8.count <= R.maxWarningBytes else {
                    throw .wrongType(type: type, field: "warn[]", expected: "a text string of at most \(R.maxWarningBytes) bytes")
                }
                warnings.append(s)
            }
        }
        let outcome: Result<[Value], RemoteQueryError>
        switch (items["err"]?.item, items["items"]?.item) {
        case (.map(let m)?, nil):
            guard case .text(let code)? = m["code"], !code.isEmpty, code.utf8.count <= R.maxErrorCodeBytes else {
                throw .wrongType(type: type, field: "err.code", expected: "a text string of 1...\(R.maxErrorCodeBytes) bytes")
            }
            guard case .text(let msg)? = m["msg"], msg.utf8.count <= R.maxErrorMessageBytes else {
                throw .wrongType(type: type, field: "err.msg", expected: "a text string of at most \(R.maxErrorMessageBytes) bytes")
            }
            outcome = .failure(RemoteQueryError(.init(wire: code), msg))
        case (nil, .array(let list)?):
            var values: [Value] = []
            values.reserveCapacity(list.count)
            for item in list { values.append(try value(item, field: "items[]", depth: limits.maxValueDepth)) }
            outcome = .success(values)
        default:
            throw .wrongType(type: type, field: "items", expected: "exactly one of \"items\" (an array) and \"err\" (a map)")
        }
        return RemoteQueryResult(id: try subID("id"), outcome: outcome, warnings: warnings, elapsedMillis: try uint("ms"))
    }
}
