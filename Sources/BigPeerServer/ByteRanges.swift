/// How to answer a `Range` header for a representation of `length` bytes (RFC 9110 §14).
///
///     Range: bytes=0-499        first 500 bytes           → single(0..<500)
///     Range: bytes=500-         from 500 to the end       → single(500..<length)
///     Range: bytes=-500         the last 500 bytes        → single(length-500..<length)
///     Range: bytes=0-0,-1       more than one range       → full (a server may ignore Range)
///     Range: bytes=9999-        starts past the end       → unsatisfiable (416)
///     Range: items=0-1, bytes=x malformed / unknown unit  → full (§14.2: ignored)
///     any Range on an empty representation                → full (200, empty body)
///
/// An empty representation has no byte a range could select, and `Content-Range` cannot express
/// an empty range, so the header is ignored there (§14.2 allows it) rather than answered 416: a
/// client asking for `bytes=0-1023` of a file it does not know is empty gets the (empty) file.
enum ByteRangeAnswer: Equatable {
    case full
    case single(Range<Int64>)
    case unsatisfiable

    static func evaluate(_ header: String?, length: Int64) -> ByteRangeAnswer {
        guard let header, length > 0 else { return .full }
        let trimmed = header.trimmingOWS
        guard let eq = trimmed.firstIndex(of: "="), trimmed[..<eq].trimmingOWS.lowercased() == "bytes" else { return .full }
        let specs = trimmed[trimmed.index(after: eq)...].split(separator: ",", omittingEmptySubsequences: false).map(\.trimmingOWS)
        guard !specs.isEmpty, !specs.contains(where: \.isEmpty) else { return .full }
        var satisfiable: [Range<Int64>] = []
        for spec in specs {
            guard let dash = spec.firstIndex(of: "-") else { return .full }
            let first = spec[..<dash], last = spec[spec.index(after: dash)...]
            if first.isEmpty {
                // suffix-range: the last N bytes (§14.1.2); N = 0 is unsatisfiable.
                guard let n = Self.number(last) else { return .full }
                if n > 0 && length > 0 { satisfiable.append(max(0, length - n)..<length) }
            } else {
                guard let a = Self.number(first) else { return .full }
                var end = length  // open-ended or last-pos past the end: to the end (§14.1.2)
                if !last.isEmpty {
                    guard let b = Self.number(last), b >= a else { return .full }  // last < first: invalid
                    end = min(b, length - 1) + 1
                }
                if a < length { satisfiable.append(a..<end) }
            }
        }
        guard !satisfiable.isEmpty else { return .unsatisfiable }
        return specs.count == 1 ? .single(satisfiable[0]) : .full
    }

    /// 1*DIGIT; values beyond Int64 saturate (a position past any real length).
    private static func number(_ s: Substring) -> Int64? {
        guard !s.isEmpty, s.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        var n: Int64 = 0
        for d in s.utf8 {
            let (m, o1) = n.multipliedReportingOverflow(by: 10)
            let (r, o2) = m.addingReportingOverflow(Int64(d - 0x30))
            if o1 || o2 { return Int64.max }
            n = r
        }
        return n
    }
}

/// Entity-tag matching for `If-None-Match` and `If-Range` (RFC 9110 §8.8.3, §13.1.2, §13.1.5).
enum EntityTags {
    /// `If-None-Match`: weak comparison against any listed tag, or `*`.
    static func noneMatchHits(_ header: String?, etag: String) -> Bool {
        guard let header else { return false }
        for raw in header.split(separator: ",") {
            let tag = raw.trimmingOWS
            if tag == "*" { return true }
            let opaque = tag.hasPrefix("W/") ? tag.dropFirst(2) : tag
            if opaque == etag { return true }
        }
        return false
    }

    /// `If-Range`: the range applies only when the tag matches strongly (a date never does here:
    /// our validator is the tag, §13.1.5).
    static func rangeStillValid(_ header: String?, etag: String) -> Bool {
        guard let header else { return true }
        return header.trimmingOWS == etag
    }
}

extension StringProtocol {
    /// Without leading and trailing spaces and tabs (OWS, RFC 9110 §5.6.3).
    var trimmingOWS: Substring {
        var s = self[...]
        while let f = s.first, f == " " || f == "\t" { s = s.dropFirst() }
        while let l = s.last, l == " " || l == "\t" { s = s.dropLast() }
        return Substring(s)
    }
}
