import HTTP

/// How a download presents an attachment to a browser, whatever type its uploader claimed.
///
/// The stored `Content-Type` is the uploader's word: served as is, `text/html` or
/// `image/svg+xml` would run the uploader's script in the server's origin for anyone who opens the
/// link (stored XSS), and without `nosniff` a browser may sniff any type into HTML. So:
/// - types on `inlineSafe` (raster images, audio, video: formats a browser decodes without ever
///   running script) are served inline, as their bare essence (`image/png`, lowercased, no
///   parameters, so no parameter or comma-joined second type can smuggle another type in);
/// - every other type, and none, is served as `application/octet-stream` with
///   `Content-Disposition: attachment`: a download, never a rendered page.
/// Every answer carries `X-Content-Type-Options: nosniff` and `Content-Security-Policy: sandbox`
/// (a document opened from here anyway, e.g. by an old browser, gets a unique origin, no script).
/// Only `sandbox`: a `default-src 'none'` would also apply to the media document a browser builds
/// around a video or audio file opened directly, and stop it loading the media itself.
/// The stored metadata is not changed: sync peers and API clients still read the uploader's type.
enum AttachmentServedType {
    /// Media types a browser only ever decodes as data. Deliberately small: nothing textual
    /// (`text/*`, XML, JSON), no `image/svg+xml` (a document with script), no PDF (viewers run script).
    static let inlineSafe: Set<String> = [
        "image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp",
        "audio/mpeg", "audio/ogg", "audio/wav", "audio/webm", "audio/aac", "audio/flac",
        "video/mp4", "video/webm", "video/ogg",
    ]

    /// Sent on every attachment answer (200, 206, 304, 416).
    static let protectiveHeaders: [(String, String)] = [
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Security-Policy", "sandbox"),
    ]

    /// The `Content-Type` to send for a stored type, and whether the content is served inline.
    static func served(stored: String?) -> (contentType: String, inline: Bool) {
        guard let stored, let essence = essence(of: stored), inlineSafe.contains(essence) else {
            return ("application/octet-stream", false)
        }
        return (essence, true)
    }

    /// The `type/subtype` of a media type (RFC 9110 §8.3.1), lowercased; nil unless it is exactly
    /// two tokens around one `/` (so `image/png, text/html` or `image/png x` is no essence at all).
    static func essence(of mediaType: String) -> String? {
        let head = mediaType.utf8.prefix { $0 != UInt8(ascii: ";") }
        var bytes = Array(head)
        while let last = bytes.last, last == 0x20 || last == 0x09 { bytes.removeLast() }
        while let first = bytes.first, first == 0x20 || first == 0x09 { bytes.removeFirst() }
        guard let slash = bytes.firstIndex(of: UInt8(ascii: "/")), slash > 0, slash < bytes.count - 1,
              bytes.allSatisfy({ $0 == UInt8(ascii: "/") || isTokenByte($0) }),
              bytes.lazy.filter({ $0 == UInt8(ascii: "/") }).count == 1
        else { return nil }
        return String(decoding: bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
    }

    /// RFC 9110 §5.6.2 tchar.
    private static func isTokenByte(_ b: UInt8) -> Bool {
        switch b {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(b)
        }
    }

    /// Adds the headers that present `stored` safely (see the type's comment).
    static func decorate(_ headers: inout HTTPHeaders, stored: String?) {
        let (type, inline) = served(stored: stored)
        headers.add("Content-Type", type)
        if !inline { headers.add("Content-Disposition", "attachment") }
    }
}
