/// When a refused peer may try again, as the end of a `refuse` reason (PROTOCOL.md §4.2):
/// `…; retry after N s`. Written by the server's connection policy, read by peers, which then
/// wait at least that long before they reconnect.
public enum RetryHint {
    static let prefix = "; retry after "
    static let suffix = " s"

    /// `reason`, cut at a character boundary so that the whole text fits `maxBytes` (a WebSocket
    /// close reason holds 123), then the hint, which always survives the cut.
    public static func reason(_ reason: String, retryAfterSeconds: UInt32, maxBytes: Int = SyncLimits.default.maxReasonBytes) -> String {
        let hint = "\(prefix)\(retryAfterSeconds)\(suffix)"
        let room = max(0, maxBytes - hint.utf8.count)
        var kept = ""
        for ch in reason {
            if kept.utf8.count + String(ch).utf8.count > room { break }
            kept.append(ch)
        }
        return kept + hint
    }

    /// The seconds a reason ending with the hint names; nil when it has none.
    public static func seconds(in reason: String) -> UInt32? {
        guard reason.hasSuffix(suffix) else { return nil }
        let body = reason.utf8.dropLast(suffix.utf8.count)
        let digits = body.reversed().prefix { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }
        guard !digits.isEmpty, digits.count <= 10, String(decoding: body.dropLast(digits.count), as: UTF8.self).hasSuffix(prefix) else { return nil }
        return UInt32(String(decoding: digits.reversed(), as: UTF8.self))
    }
}
