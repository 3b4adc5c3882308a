import Testing
import Values
@testable import BigPeerServer

/// A streamed response is the buffered response's object: JSON byte for byte, CBOR with the same
/// keys in the same order and only the streamed array's length left open (docs/API.md, "Large results").
@Suite struct ResultStreamingFramingTests {
    static let rows: [Value] = [["_id": "a", "n": 1], ["_id": "b", "tags": ["x", "y"], "pad": "é水"], [:]]

    func streamed(_ envelope: ResultStreaming.Envelope, _ format: APIEncoding.Format, txn: Int64, rows: [Value]) -> [UInt8] {
        let framing = ResultStreaming.Framing(envelope, format: format, transactionID: txn)
        var out = ResultStreaming.RowBuffer(format: format)
        out.append(raw: framing.head)
        // Taken in pieces, as the chunks of a long result are.
        var bytes: [UInt8] = []
        for row in rows {
            out.append(envelope.row(row))
            bytes += out.take()
        }
        out.append(raw: framing.tail)
        return bytes + out.take()
    }

    func buffered(_ envelope: ResultStreaming.Envelope, txn: Int64, rows: [Value]) -> Value {
        let (key, others) = envelope.members(transactionID: txn)
        var object = others
        object[key] = .array(rows.map(envelope.row))
        return .object(object)
    }

    @Test(arguments: [0, 1, 3])
    func jsonIsTheBufferedBytes(rowCount: Int) throws {
        for envelope in [ResultStreaming.Envelope.execute, .legacyFind] {
            let rows = Array(Self.rows.prefix(rowCount))
            let body = buffered(envelope, txn: 4_294_967_296, rows: rows)
            #expect(streamed(envelope, .json, txn: 4_294_967_296, rows: rows) == JSON.serialize(body))
        }
    }

    @Test(arguments: [0, 1, 3])
    func cborIsTheBufferedMapWithAnOpenArray(rowCount: Int) throws {
        for envelope in [ResultStreaming.Envelope.execute, .legacyFind] {
            let rows = Array(Self.rows.prefix(rowCount))
            let body = buffered(envelope, txn: 70_000, rows: rows)
            let bytes = streamed(envelope, .cbor, txn: 70_000, rows: rows)
            #expect(try CBORValueCodec.decode(bytes, limits: CBORLimits(requireCanonical: false)) == body)
            #expect(throws: CBORError.self, "not deterministic encoding") { try CBORValueCodec.decode(bytes) }
            // Deterministic but for the array: replacing its open header and break by a count
            // gives the buffered encoding exactly.
            let canonical = CBORValueCodec.encode(body)
            let open = try #require(bytes.firstIndex(of: 0x9F))
            var closed = Array(bytes[..<open])
            var header = CBORWriter()
            header.arrayHeader(rows.count)
            closed += header.bytes
            var rest = Array(bytes[(open + 1)...])
            let rowsEncoded = rows.map { CBORValueCodec.encode(envelope.row($0)) }.reduce([], +)
            #expect(Array(rest.prefix(rowsEncoded.count)) == rowsEncoded)
            rest.remove(at: rowsEncoded.count)  // the break
            closed += rest
            #expect(closed == canonical)
        }
    }
}
