import HTTP
import Logging
import Store
import Values

/// A large SELECT's JSON response, written as it is read (docs/API.md, "Large results").
///
///     {"items":[ row , row , … ],"mutatedDocumentIds":[],"queryType":"select",…,"transactionId":N,"warnings":[]}
///      └ head ─┘ └ one FETCH at a time, in ~64 KiB chunks ┘ └ tail (the snapshot's number is known from the first batch) ┘
///
/// The same bytes as a buffered response (members in sorted key order), sent with chunked
/// transfer coding. Backpressure runs end to end: `HTTPBodyWriter.write` suspends while the
/// connection has more than its high-water mark queued, and the cursor's next FETCH is only
/// sent after the rows before it were written, so a slow reader leaves PostgreSQL waiting, not
/// the server's memory growing.
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

        var head: String {
            switch self {
            case .execute: #"{"items":["#
            case .legacyFind: #"{"documents":["#
            }
        }

        func tail(transactionID: Int64) -> String {
            switch self {
            case .execute:
                #"],"mutatedDocumentIds":[],"queryType":"select","totalWarningsCount":0,"transactionId":"#
                    + String(transactionID) + #","warnings":[]}"#
            case .legacyFind: #"],"txnId":"# + String(transactionID) + "}"
            }
        }

        func write(_ row: Value, into out: inout [UInt8]) {
            switch self {
            case .execute: JSONWriter.write(row, into: &out)
            case .legacyFind: JSONWriter.write(LegacyCommands.document(row), into: &out)
            }
        }
    }

    /// Bytes serialized before they are handed to the connection: large enough that the chunk
    /// framing and the hop to the writer are noise, small next to the connection's high-water mark.
    static let chunkBytes = 64 << 10

    static func response(_ cursor: SelectCursor, request: HTTPRequest, logger: Logger, envelope: Envelope) -> HTTPResponse {
        var headers: HTTPHeaders = ["Content-Type": "application/json"]
        headers.add("Vary", "Accept")
        let requestID = request.requestID
        return HTTPResponse(status: .ok, headers: headers, body: .stream { writer in
            do {
                try await write(cursor, envelope: envelope, to: writer)
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

    static func write(_ cursor: SelectCursor, envelope: Envelope, to writer: HTTPBodyWriter) async throws {
        var out: [UInt8] = []
        out.reserveCapacity(chunkBytes + chunkBytes / 4)
        out.append(contentsOf: envelope.head.utf8)
        var first = true
        while let rows = try await cursor.next() {
            for row in rows {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                envelope.write(row, into: &out)
                if out.count >= chunkBytes {
                    try await writer.write(out)
                    out = []
                    out.reserveCapacity(chunkBytes + chunkBytes / 4)
                }
            }
        }
        out.append(contentsOf: envelope.tail(transactionID: cursor.transactionID).utf8)
        try await writer.write(out)
    }
}
