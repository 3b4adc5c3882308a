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
/// never buffered whole. Errors have the API's error object (`APIError`), always in JSON.
///
/// Auth (docs/AUTH.md, "Attachments"): attachments are content-addressed and belong to no
/// collection, so uploading needs a key that may write at least one collection (checked before the
/// upload body is read: a 401/403 then closes the connection). Downloading needs the attachment
/// scope (`Principal.readsAnyAttachment`), or a live document that references the attachment and
/// that the caller may read (`DocumentStore.attachmentIsReadable`); otherwise the answer is the
/// 404 of an attachment that does not exist.
struct AttachmentRoutes {
    let store: AttachmentStore
    let documents: DocumentStore
    let auth: Authenticator
    /// Largest file accepted (413 above).
    let maxBytes: Int
    let logger: Logger

    /// Room for the multipart framing around the file (boundaries, part headers, small fields).
    static let multipartOverhead = 64 * 1024

    func register(on router: inout HTTPRouter) {
        let store = self.store, documents = self.documents, maxBytes = self.maxBytes, logger = self.logger, auth = self.auth
        router.post("/api/v4/attachments/upload", .streaming(maxBodyBytes: maxBytes + Self.multipartOverhead) { request, body in
            if case .failure(let denied) = await Self.check(request, auth: auth, needsWrite: true, logger: logger) { return .response(denied.response) }
            return .response(await Self.upload(request, body, store: store, maxBytes: maxBytes, logger: logger))
        })
        router.get("/api/v4/attachments/:id", .respond { request in
            let principal: Principal
            switch await Self.check(request, auth: auth, needsWrite: false, logger: logger) {
            case .success(let p): principal = p
            case .failure(let denied): return denied.response
            }
            return await Self.download(request, store: store, logger: logger) { id in
                if principal.readsAnyAttachment { return true }
                return try await documents.attachmentIsReadable(id, mayRead: principal.read.covers, rules: principal.readRules)
            }
        })
    }

    /// The caller when it may go on; otherwise the 401/403/503 response. A download needs read
    /// access to at least one collection or the attachment scope; which attachments the caller
    /// may then fetch is decided per id (`download`).
    static func check(_ request: HTTPRequest, auth: Authenticator, needsWrite: Bool, logger: Logger) async -> Result<Principal, PresenceRoute.RefusalResponse> {
        let principal: Principal
        switch await auth.authenticate(request) {
        case .success(let p): principal = p
        case .failure(let e): return .failure(PresenceRoute.RefusalResponse(failure(e, request, logger)))
        }
        let scope = needsWrite ? principal.write : principal.read
        if case .only(let set) = scope, set.isEmpty, needsWrite || !principal.readsAnyAttachment {
            return .failure(PresenceRoute.RefusalResponse(failure(AuthError.forbidden(needsWrite ? "uploading attachments needs write access to at least one collection"
                                                                                     : "downloading attachments needs read access to at least one collection"),
                                                      request, logger)))
        }
        return .success(principal)
    }

    // MARK: - Upload

    static func upload(_ request: HTTPRequest, _ body: HTTPRequestBody, store: AttachmentStore, maxBytes: Int, logger: Logger) async -> HTTPResponse {
        guard let contentType = request.headers["Content-Type"] else {
            return failure(APIError(.unsupportedMediaType, "Content-Type must be multipart/form-data with a boundary"), request, logger)
        }
        guard let boundary = MultipartParser.boundary(fromContentType: contentType) else {
            let isMultipart = MultipartParser.parameters(of: contentType).0 == "multipart/form-data"
            return failure(isMultipart ? APIError(.badRequest, "the multipart/form-data boundary parameter is missing or invalid")
                                       : APIError(.unsupportedMediaType, "Content-Type must be multipart/form-data"), request, logger)
        }
        let reader = UploadReader(parser: MultipartParser(boundary: boundary), body: body)
        do {
            guard let filePart = try await reader.seekFilePart() else {
                return failure(APIError(.badRequest, "the form has no part named \"file\""), request, logger)
            }
            let fileType = filePart.contentType
            // Stored and later sent as a header: only a printable-ASCII media type (RFC 9110 §8.3) is kept.
            let storedType = fileType.flatMap { t in
                !t.isEmpty && t.utf8.count <= 255 && t.utf8.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) ? t : nil
            }
            let stored = try await store.store(contentType: storedType, maxBytes: maxBytes, from: { try await reader.nextFileBytes() })
            let out: Value = .object(["id": .string(stored.info.id.hex), "len": .int(stored.info.length)])
            return .json(JSON.serialize(out))
        } catch let e as MultipartError {
            return failure(APIError(.badRequest, e.description), request, logger)
        } catch let e as UploadReader.FormError {
            return failure(APIError(.badRequest, e.message), request, logger)
        } catch {
            return failure(error, request, logger)
        }
    }

    // MARK: - Download

    /// `mayRead` decides whether this caller may have the attachment: when it may not, the answer
    /// is the one for an id that does not exist.
    static func download(_ request: HTTPRequest, store: AttachmentStore, logger: Logger,
                         mayRead: (AttachmentID) async throws -> Bool) async -> HTTPResponse {
        guard let raw = request.pathParameters["id"], let id = AttachmentID(raw) else {
            return failure(APIError(.badRequest, "an attachment id is 64 lowercase hex digits (the SHA-256 of the content)"), request, logger)
        }
        let info: AttachmentInfo
        do {
            guard try await mayRead(id), let found = try await store.info(id) else {
                return failure(APIError(.notFound, "no attachment \(id)"), request, logger)
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
            // Private: who may read them is decided per request, so no shared cache (a CDN, a
            // proxy) may keep them for the next caller (§5.2.2.7).
            "Cache-Control": "private, max-age=31536000, immutable",
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
            var r = failure(APIError(.rangeNotSatisfiable, "the range is outside the \(info.length) bytes of the attachment"), request, logger)
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

    /// The error response of an attachment route: JSON whatever the `Accept` (as its successes).
    static func failure(_ error: any Error, _ request: HTTPRequest, _ logger: Logger) -> HTTPResponse {
        APIError(error).response(to: request, logger: logger, negotiated: false)
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
