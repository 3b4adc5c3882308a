import Auth
import HTTP
import Logging
import Store
import Values

/// Attachments over REST (docs/API.md, "Attachments"):
///
///     POST /api/v4/attachments/upload   multipart/form-data, part "file"  → 200 {"id": "<sha256 hex>", "len": n}
///     GET  /api/v4/attachments/{id}     the bytes; ETag, If-None-Match → 304, Range → 206 / 416
///
/// The upload route streams: the file part goes to the store as it arrives (one chunk in memory),
/// never buffered whole. Errors use the server's JSON error shape
/// `{"error":{"status":…,"message":"…","requestId":"…"}}`.
///
/// Auth: attachments are content-addressed and belong to no collection, so uploading needs a key
/// that may write at least one collection, and downloading one that may read at least one. The
/// check runs before the upload body is read (a 401/403 then closes the connection).
struct AttachmentRoutes {
    let store: AttachmentStore
    let auth: Authenticator
    /// Largest file accepted (413 above).
    let maxBytes: Int
    let logger: Logger

    /// Room for the multipart framing around the file (boundaries, part headers, small fields).
    static let multipartOverhead = 64 * 1024

    func register(on router: inout HTTPRouter) {
        let store = self.store, maxBytes = self.maxBytes, logger = self.logger, auth = self.auth
        router.post("/api/v4/attachments/upload", .streaming(maxBodyBytes: maxBytes + Self.multipartOverhead) { request, body in
            if let denied = await Self.check(request, auth: auth, needsWrite: true) { return .response(denied) }
            return .response(await Self.upload(request, body, store: store, maxBytes: maxBytes, logger: logger))
        })
        router.get("/api/v4/attachments/:id", .respond { request in
            if let denied = await Self.check(request, auth: auth, needsWrite: false) { return denied }
            return await Self.download(request, store: store, logger: logger)
        })
    }

    /// nil when the caller may proceed; otherwise the 401/403/503 response.
    static func check(_ request: HTTPRequest, auth: Authenticator, needsWrite: Bool) async -> HTTPResponse? {
        let principal: Principal
        switch await auth.authenticate(request) {
        case .success(let p): principal = p
        case .failure(let e):
            var r = HTTPResponse.error(httpStatus(e.httpStatus), message: e.description, requestID: request.requestID)
            APIEncoding.decorate(&r, for: e)
            return r
        }
        let scope = needsWrite ? principal.write : principal.read
        if case .only(let set) = scope, set.isEmpty {
            let e = AuthError.forbidden(needsWrite ? "uploading attachments needs write access to at least one collection"
                                                   : "downloading attachments needs read access to at least one collection")
            var r = HTTPResponse.error(.forbidden, message: e.description, requestID: request.requestID)
            APIEncoding.decorate(&r, for: e)
            return r
        }
        return nil
    }

    // MARK: - Upload

    static func upload(_ request: HTTPRequest, _ body: HTTPRequestBody, store: AttachmentStore, maxBytes: Int, logger: Logger) async -> HTTPResponse {
        guard let contentType = request.headers["Content-Type"] else {
            return .error(HTTPStatus(415, "Unsupported Media Type"), message: "Content-Type must be multipart/form-data with a boundary", requestID: request.requestID)
        }
        guard let boundary = MultipartParser.boundary(fromContentType: contentType) else {
            let isMultipart = MultipartParser.parameters(of: contentType).0 == "multipart/form-data"
            return isMultipart
                ? .error(.badRequest, message: "the multipart/form-data boundary parameter is missing or invalid", requestID: request.requestID)
                : .error(HTTPStatus(415, "Unsupported Media Type"), message: "Content-Type must be multipart/form-data", requestID: request.requestID)
        }
        let reader = UploadReader(parser: MultipartParser(boundary: boundary), body: body)
        do {
            guard let filePart = try await reader.seekFilePart() else {
                return .error(.badRequest, message: "the form has no part named \"file\"", requestID: request.requestID)
            }
            let fileType = filePart.contentType
            // Stored and later sent as a header: only a printable-ASCII media type (RFC 9110 §8.3) is kept.
            let storedType = fileType.flatMap { t in
                !t.isEmpty && t.utf8.count <= 255 && t.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) ? t : nil
            }
            let stored = try await store.store(contentType: storedType, maxBytes: maxBytes, from: { try await reader.nextFileBytes() })
            let out: Value = .object(["id": .string(stored.info.id.hex), "len": .int(stored.info.length)])
            return .json(JSON.serialize(out))
        } catch let e as AttachmentError {
            if case .database(let pg) = e { logger.error("attachment upload failed", metadata: ["error": "\(pg.debugDescription)", "request-id": "\(request.requestID)"]) }
            if case .corrupt = e { logger.error("attachment upload failed", metadata: ["error": "\(e)", "request-id": "\(request.requestID)"]) }
            var r = HTTPResponse.error(httpStatus(e.httpStatus), message: e.description, requestID: request.requestID)
            if e.httpStatus == 503 { r.headers.add("Retry-After", "2") }
            return r
        } catch let e as MultipartError {
            return .error(.badRequest, message: e.description, requestID: request.requestID)
        } catch let e as UploadReader.FormError {
            return .error(.badRequest, message: e.message, requestID: request.requestID)
        } catch let e as HTTPRequestBody.Failed {
            return .error(e.reason == .tooLarge ? .contentTooLarge : .badRequest, message: e.description, requestID: request.requestID)
        } catch {
            logger.error("attachment upload failed", metadata: ["error": "\(error)", "request-id": "\(request.requestID)"])
            return .error(.internalServerError, message: "internal error", requestID: request.requestID)
        }
    }

    // MARK: - Download

    static func download(_ request: HTTPRequest, store: AttachmentStore, logger: Logger) async -> HTTPResponse {
        guard let raw = request.pathParameters["id"], let id = AttachmentID(raw) else {
            return .error(.badRequest, message: "an attachment id is 64 lowercase hex digits (the SHA-256 of the content)", requestID: request.requestID)
        }
        let info: AttachmentInfo
        do {
            guard let found = try await store.info(id) else {
                return .error(.notFound, message: "no attachment \(id)", requestID: request.requestID)
            }
            info = found
        } catch {
            return failure(error, request, logger)
        }
        let etag = "\"\(id.hex)\""
        var headers: HTTPHeaders = [
            "ETag": etag,
            "Accept-Ranges": "bytes",
            // Content-addressed: the bytes behind an id never change (RFC 9111 §5.2.2; RFC 8246).
            "Cache-Control": "public, max-age=31536000, immutable",
        ]
        for (name, value) in AttachmentServedType.protectiveHeaders { headers.add(name, value) }
        if EntityTags.noneMatchHits(request.headers["If-None-Match"], etag: etag) {  // RFC 9110 §13.1.2
            return HTTPResponse(status: .notModified, headers: headers)
        }
        // Never the uploader's type as such: it could make the bytes a page in our origin.
        AttachmentServedType.decorate(&headers, stored: info.contentType)
        var answer = ByteRangeAnswer.evaluate(request.headers["Range"], length: info.length)
        if !EntityTags.rangeStillValid(request.headers["If-Range"], etag: etag) { answer = .full }  // §13.1.5
        let range: Range<Int64>
        let status: HTTPStatus
        switch answer {
        case .full:
            range = 0..<info.length
            status = .ok
        case .single(let r):
            range = r
            status = HTTPStatus(206, "Partial Content")
            headers.add("Content-Range", "bytes \(r.lowerBound)-\(r.upperBound - 1)/\(info.length)")  // §14.4
        case .unsatisfiable:
            var r = HTTPResponse.error(HTTPStatus(416, "Range Not Satisfiable"), message: "the range is outside the \(info.length) bytes of the attachment", requestID: request.requestID)
            r.headers.add("Content-Range", "bytes */\(info.length)")  // §15.5.17
            for (name, value) in AttachmentServedType.protectiveHeaders { r.headers.add(name, value) }
            return r
        }
        return HTTPResponse(status: status, headers: headers, body: .sizedStream(length: Int(range.count)) { writer in
            do {
                try await store.read(info, range: range) { try await writer.write($0) }
            } catch let e as AttachmentError {
                logger.error("attachment download failed mid-body", metadata: ["id": "\(id)", "error": "\(e)"])
                throw e
            }
        })
    }

    static func failure(_ error: any Error, _ request: HTTPRequest, _ logger: Logger) -> HTTPResponse {
        guard let e = error as? AttachmentError else {
            logger.error("attachment request failed", metadata: ["error": "\(error)", "request-id": "\(request.requestID)"])
            return .error(.internalServerError, message: "internal error", requestID: request.requestID)
        }
        if e.httpStatus == 500 { logger.error("attachment request failed", metadata: ["error": "\(e)", "request-id": "\(request.requestID)"]) }
        var r = HTTPResponse.error(httpStatus(e.httpStatus), message: e.description, requestID: request.requestID)
        if e.httpStatus == 503 { r.headers.add("Retry-After", "2") }
        return r
    }
}

/// Pulls the `file` part of a multipart/form-data upload out of a streamed request body.
/// Used by one task at a time (the upload handler), hence not `Sendable`.
final class UploadReader {
    struct FormError: Error { let message: String }
    struct FilePart { let contentType: String? }

    private var parser: MultipartParser
    private let body: HTTPRequestBody
    private var inputEnded = false
    private var fileDone = false

    init(parser: MultipartParser, body: HTTPRequestBody) {
        self.parser = parser
        self.body = body
    }

    /// Skips parts until the one named `file` (RFC 7578 §4.2) and returns its head (a missing
    /// Content-Type means `application/octet-stream`, §4.4), or nil if the form ends without it.
    func seekFilePart() async throws -> FilePart? {
        while true {
            switch try await event() {
            case .partHead(let headers):
                let (disposition, params) = MultipartParser.parameters(of: headers["Content-Disposition"] ?? "")
                guard disposition == "form-data" else { throw FormError(message: "a part has no Content-Disposition: form-data") }
                if params["name"] == "file" { return FilePart(contentType: headers["Content-Type"]) }
            case .end:
                try await drain()
                return nil
            case .data, .partEnd, .needMoreData:
                continue
            }
        }
    }

    /// The next bytes of the file part; nil once it ended and the rest of the form was read
    /// and found well-formed (so a broken form never stores anything).
    func nextFileBytes() async throws -> [UInt8]? {
        guard !fileDone else { return nil }
        while true {
            switch try await event() {
            case .data(let bytes):
                return bytes
            case .partEnd:
                fileDone = true
                try await drainRestOfForm()
                return nil
            case .partHead, .end, .needMoreData:
                throw FormError(message: "unexpected multipart structure")
            }
        }
    }

    private func drainRestOfForm() async throws {
        while true {
            switch try await event() {
            case .partHead(let headers):
                let (_, params) = MultipartParser.parameters(of: headers["Content-Disposition"] ?? "")
                if params["name"] == "file" { throw FormError(message: "the form has more than one part named \"file\"") }
            case .end:
                return try await drain()
            case .data, .partEnd, .needMoreData:
                continue
            }
        }
    }

    /// Reads the epilogue to the end of the request content.
    private func drain() async throws {
        while !inputEnded {
            if try await body.next() == nil { inputEnded = true }
        }
    }

    /// The next parser event, reading more content when it needs some.
    private func event() async throws -> MultipartEvent {
        while true {
            let e = try parser.next()
            guard case .needMoreData = e else { return e }
            guard !inputEnded, let more = try await body.next() else {
                inputEnded = true
                try parser.finish()
                throw MultipartError.truncated
            }
            parser.feed(more)
        }
    }
}
