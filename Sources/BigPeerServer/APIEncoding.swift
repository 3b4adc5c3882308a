import DQL
import Foundation
import HTTP
import Store
import Values

/// Request and response bodies of the REST API: JSON by default, CBOR (RFC 8949) when asked.
///
/// - Request: `Content-Type: application/cbor` bodies are decoded with the Values CBOR codec
///   (depth at most 64, total size bounded by the request body limit); any other or no
///   content type is read as JSON (so `curl -d` works without a header).
/// - Response: CBOR when `Accept` lists `application/cbor` with a quality above zero and at least
///   the quality of `application/json` (RFC 9110 §12.5.1); JSON otherwise. The object is the same
///   in both encodings. `Vary: Accept` tells caches the body depends on it.
enum APIEncoding {
    enum Format: Equatable { case json, cbor }

    static func responseFormat(_ request: HTTPRequest) -> Format {
        let accept = request.headers.values("Accept")
        // Fast path (most requests): nothing mentions CBOR, so no parsing.
        if !accept.contains(where: { mentionsCBOR($0) }) { return .json }
        var cbor = 0.0, json = 0.0
        for field in accept {
            for range in field.split(separator: ",") {
                let parts = range.split(separator: ";")
                guard let type = parts.first?.trimmingCharacters(in: .whitespaces).lowercased() else { continue }
                var q = 1.0
                for p in parts.dropFirst() {
                    let kv = p.split(separator: "=", maxSplits: 1)
                    if kv.count == 2, kv[0].trimmingCharacters(in: .whitespaces).lowercased() == "q" {
                        q = Double(kv[1].trimmingCharacters(in: .whitespaces)) ?? 0
                    }
                }
                if type == "application/cbor" { cbor = max(cbor, q) }
                if type == "application/json" || type == "application/*" || type == "*/*" { json = max(json, q) }
            }
        }
        return cbor > 0 && cbor >= json ? .cbor : .json
    }

    /// True when `field` contains "cbor" in any ASCII case. A byte scan: this runs on every
    /// request, and Foundation's `lowercased().contains` cost more than the rest of the header work.
    static func mentionsCBOR(_ field: String) -> Bool {
        field.utf8.withContiguousStorageIfAvailable(scanForCBOR) ?? Array(field.utf8).withUnsafeBufferPointer(scanForCBOR)
    }

    private static func scanForCBOR(_ b: UnsafeBufferPointer<UInt8>) -> Bool {
        guard b.count >= 4 else { return false }
        for i in 0...(b.count - 4) where b[i] | 0x20 == UInt8(ascii: "c") && b[i + 1] | 0x20 == UInt8(ascii: "b")
            && b[i + 2] | 0x20 == UInt8(ascii: "o") && b[i + 3] | 0x20 == UInt8(ascii: "r") {
            return true
        }
        return false
    }

    /// The request body as a value, or a description of why it cannot be read.
    /// Bodies from this size on are decoded on the evaluation threads, not on the request's event
    /// loop: parsing a few MiB of JSON takes milliseconds that every other connection of the
    /// loop would wait (docs/performance-history.md, "Hostile mix").
    static let offLoopDecodeBytes = 256 << 10

    /// `decodeBody`, off the event loop when the body is large.
    static func decodeBodyOffLoopIfLarge(_ request: HTTPRequest) async -> Result<Value, APIError> {
        guard request.body.count >= offLoopDecodeBytes else { return decodeBody(request) }
        do { return try await InMemoryEvaluation.offLoop { decodeBody(request) } } catch {
            return .failure(APIError(.badRequest, "the request body could not be decoded: \(error)"))
        }
    }

    static func decodeBody(_ request: HTTPRequest) -> Result<Value, APIError> {
        let type = request.headers["Content-Type"].flatMap { mentionsCBOR($0) ? $0 : nil }?
            .split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        if type == "application/cbor" {
            // The body is already bounded by the server's body limit; the other limits (depth,
            // string and container sizes) stay at the codec's defaults.
            var limits = CBORLimits.default
            limits.maxInputBytes = max(limits.maxInputBytes, request.body.count)
            do { return .success(try CBORValueCodec.decode(request.body, limits: limits)) } catch {
                return .failure(APIError(.badRequest, "the request body is not valid CBOR: \(error)"))
            }
        }
        // As for CBOR: the server's body limit already bounds the size; depth and keys keep the defaults.
        var jsonLimits = JSONLimits()
        jsonLimits.maxInputBytes = max(jsonLimits.maxInputBytes, request.body.count)
        do { return .success(try JSON.parse(request.body, limits: jsonLimits)) } catch {
            return .failure(APIError(.badRequest, "the request body is not valid JSON: \(error)"))
        }
    }

    /// `value` encoded as the request asked.
    static func respond(_ value: Value, status: HTTPStatus = .ok, to request: HTTPRequest) -> HTTPResponse {
        var r: HTTPResponse
        switch responseFormat(request) {
        case .json: r = .json(JSON.serialize(value), status: status)
        case .cbor: r = HTTPResponse(status: status, contentType: "application/cbor", body: CBORValueCodec.encode(value))
        }
        r.headers.add("Vary", "Accept")
        return r
    }

    /// `X-DITTO-TXN-ID`: nil when absent, `.failure` when not a non-negative integer.
    static func minimumTransaction(_ request: HTTPRequest) -> Result<Int64?, APIError> {
        guard let header = request.headers["X-DITTO-TXN-ID"] else { return .success(nil) }
        guard let n = Int64(header.trimmingCharacters(in: .whitespaces)), n >= 0 else {
            return .failure(APIError(.badRequest, "X-DITTO-TXN-ID must be a non-negative integer"))
        }
        return .success(n)
    }
}
