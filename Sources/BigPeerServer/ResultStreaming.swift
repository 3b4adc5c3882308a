import DQL
import HTTP
import Logging
import Store
import Values

/// A large SELECT's response, written as it is read (docs/API.md, "Large results"), in JSON or CBOR.
///
///     {"items":[ row , row , … ],"mutatedDocumentIds":[],"queryType":"select",…,"transactionId":N,"warnings":[]}
///      └ head ─┘ └ one FETCH at a time, in ~64 KiB chunks ┘ └ tail ┘
///
/// JSON: the same bytes as a buffered response (members in sorted key order). CBOR: the same map,
/// keys in the same deterministic order as a buffered response, except that the streamed array
/// (`items`, legacy `documents`) has indefinite length (RFC 8949 §3.2.2: `0x9f` items `0xff`),
/// because its length is not known when it starts. Either is sent with chunked transfer coding.
/// Backpressure runs end to end: `HTTPBodyWriter.write` suspends while the connection has more
/// than its high-water mark queued, and the cursor's next FETCH is only sent after the rows before
/// it were written, so a slow reader leaves PostgreSQL waiting, not the server's memory growing.
///
/// Failure after the head was sent (the database goes away, a row fails evaluation): the status
/// line already said 200, so the connection is closed without the terminating zero-length chunk
/// (RFC 9112 §7.1); every HTTP client then reports an incomplete body, never a short valid one.
enum ResultStreaming {
    enum Envelope: Sendable {
        /// `POST /api/v4/store/execute`.
        case execute
        /// `POST /api/v4/store/find`: `{"documents":[{"fields":…,"id":…}],"txnId":N}`.
        case legacyFind

        /// The response object without its streamed array, and that array's key.
        func members(transactionID: Int64) -> (streamed: String, others: [String: Value]) {
            switch self {
            case .execute:
                ("items", ["mutatedDocumentIds": .array([]), "queryType": "select", "totalWarningsCount": .int(0),
                           "transactionId": .int(transactionID), "warnings": .array([])])
            case .legacyFind: ("documents", ["txnId": .int(transactionID)])
            }
        }

        func row(_ row: Value) -> Value {
            switch self {
            case .execute: row
            case .legacyFind: LegacyCommands.document(row)
            }
        }
    }

    /// How the response around the rows is framed in one encoding.
    struct Framing {
        let head: [UInt8]
        let tail: [UInt8]
        let format: APIEncoding.Format

        init(_ envelope: Envelope, format: APIEncoding.Format, transactionID: Int64) {
            self.format = format
            let (streamed, others) = envelope.members(transactionID: transactionID)
            // Members in the encoding's key order; the streamed array's rows go between head and tail.
            var members = others
            members[streamed] = .array([])
            let keys = format == .json ? JSONWriter.sortedKeys(members) : CBORKeyOrder.sorted(members.keys)
            let split = keys.firstIndex(of: streamed) ?? 0
            let before = keys[..<split], after = keys[(split + 1)...]
            switch format {
            case .json:
                var head = [UInt8(ascii: "{")], tail = [UInt8(ascii: "]")]
                for k in before {
                    JSONWriter.write(.string(k), into: &head); head.append(UInt8(ascii: ":"))
                    JSONWriter.write(others[k] ?? .null, into: &head); head.append(UInt8(ascii: ","))
                }
                JSONWriter.write(.string(streamed), into: &head)
                head.append(contentsOf: ":[".utf8)
                for k in after {
                    tail.append(UInt8(ascii: ","))
                    JSONWriter.write(.string(k), into: &tail); tail.append(UInt8(ascii: ":"))
                    JSONWriter.write(others[k] ?? .null, into: &tail)
                }
                tail.append(UInt8(ascii: "}"))
                (self.head, self.tail) = (head, tail)
            case .cbor:
                var head = CBORWriter(), tail = CBORWriter()
                head.mapHeader(keys.count)
                for k in before { head.text(k); head.value(others[k] ?? .null) }
                head.text(streamed)
                head.indefiniteArrayStart()
                tail.breakStop()
                for k in after { tail.text(k); tail.value(others[k] ?? .null) }
                (self.head, self.tail) = (head.bytes, tail.bytes)
            }
        }
    }

    /// Bytes serialized before they are handed to the connection: large enough that the chunk
    /// framing and the hop to the writer are noise, small next to the connection's high-water mark.
    static let chunkBytes = 64 << 10

    static func response(_ cursor: SelectCursor, request: HTTPRequest, logger: Logger, envelope: Envelope,
                         format: APIEncoding.Format) -> HTTPResponse {
        var headers: HTTPHeaders = ["Content-Type": format == .cbor ? "application/cbor" : "application/json"]
        headers.add("Vary", "Accept")
        let requestID = request.requestID
        // The body is produced in a task of its own, after this handler returned: its batches are
        // evaluated for the same tenant as the handler's work.
        let tenant = InMemoryEvaluation.tenant
        return HTTPResponse(status: .ok, headers: headers, body: .stream { writer in
            do {
                try await InMemoryEvaluation.$tenant.withValue(tenant) {
                    try await write(cursor, envelope: envelope, format: format, to: writer)
                }
            } catch {
                await cursor.close()
                if error is HTTPBodyWriter.Closed {
                    logger.debug("client left during a streamed result", metadata: ["request_id": "\(requestID)"])
                } else {
                    logger.error("streamed result failed after its head was sent; closing the connection",
                                 metadata: ["error": "\(error)", "request_id": "\(requestID)"])
                }
                throw error  // the writer aborts: no last chunk
            }
        })
    }

    static func write(_ cursor: SelectCursor, envelope: Envelope, format: APIEncoding.Format, to writer: HTTPBodyWriter) async throws {
        let framing = Framing(envelope, format: format, transactionID: cursor.transactionID)
        var out = RowBuffer(format: format)
        out.append(raw: framing.head)
        while let rows = try await cursor.next() {
            for row in rows {
                out.append(envelope.row(row))
                if out.count >= chunkBytes { try await writer.write(out.take()) }
            }
        }
        out.append(raw: framing.tail)
        try await writer.write(out.take())
    }

    /// Rows encoded into one chunk's bytes (JSON with separating commas; CBOR items back to back).
    struct RowBuffer {
        private var json: [UInt8] = []
        private var cbor = CBORWriter(capacity: ResultStreaming.chunkBytes + ResultStreaming.chunkBytes / 4)
        private var rows = 0
        let format: APIEncoding.Format

        init(format: APIEncoding.Format) {
            self.format = format
            if format == .json { json.reserveCapacity(ResultStreaming.chunkBytes + ResultStreaming.chunkBytes / 4) }
        }

        var count: Int { format == .json ? json.count : cbor.bytes.count }

        mutating func append(raw: [UInt8]) {
            switch format {
            case .json: json.append(contentsOf: raw)
            case .cbor: cbor.raw(raw)
            }
        }

        mutating func append(_ row: Value) {
            switch format {
            case .json:
                if rows > 0 { json.append(UInt8(ascii: ",")) }
                JSONWriter.write(row, into: &json)
            case .cbor: cbor.value(row)
            }
            rows += 1
        }

        mutating func take() -> [UInt8] {
            switch format {
            case .json:
                let taken = json
                json = []
                json.reserveCapacity(taken.capacity)
                return taken
            case .cbor: return cbor.takeBytes()
            }
        }
    }
}
