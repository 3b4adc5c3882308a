/// Text form of timestamptz with the session in UTC: `2026-11-22 08:11:11.123456+00`,
/// years before 1 AD as `0044-03-15 00:00:00+00 BC`, and `infinity` / `-infinity`.
extension PostgresTimestamp: PostgresEncodable, PostgresDecodable {
    public static var postgresType: PostgresOID { PostgresType.timestamptz }

    public static let infinity = PostgresTimestamp(microsecondsSince1970: .max)
    public static let negativeInfinity = PostgresTimestamp(microsecondsSince1970: .min)

    public var postgresText: String {
        if self == .infinity { return "infinity" }
        if self == .negativeInfinity { return "-infinity" }
        let us = microsecondsSince1970
        var days = us / 86_400_000_000
        var rem = us % 86_400_000_000
        if rem < 0 { rem += 86_400_000_000; days -= 1 }
        let (y, m, d) = Self.civil(fromDays: days)
        let secs = rem / 1_000_000, frac = rem % 1_000_000
        func pad(_ v: Int64, _ w: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, w - s.count)) + s
        }
        let bc = y <= 0
        let year = bc ? 1 - y : y
        return "\(pad(year, 4))-\(pad(m, 2))-\(pad(d, 2)) \(pad(secs / 3600, 2)):\(pad(secs / 60 % 60, 2)):\(pad(secs % 60, 2)).\(pad(frac, 6))+00\(bc ? " BC" : "")"
    }

    public static func decode(postgresText t: UnsafeRawBufferPointer, type: PostgresOID) throws(PostgresDecodeFailure) -> PostgresTimestamp {
        let s = String(decoding: t, as: UTF8.self)
        if s == "infinity" { return .infinity }
        if s == "-infinity" { return .negativeInfinity }
        var bytes = Array(s.utf8)
        var bc = false
        if bytes.count > 3 && String(decoding: bytes.suffix(3), as: UTF8.self) == " BC" {
            bc = true
            bytes.removeLast(3)
        }
        var i = 0
        func number(_ maxDigits: Int) throws(PostgresDecodeFailure) -> Int64 {
            var v: Int64 = 0
            var n = 0
            while i < bytes.count, n < maxDigits, bytes[i] >= 48, bytes[i] <= 57 {
                v = v * 10 + Int64(bytes[i] - 48)
                i += 1; n += 1
            }
            guard n > 0 else { throw PostgresDecodeFailure("malformed timestamp '\(s)'") }
            return v
        }
        func expect(_ c: Character) throws(PostgresDecodeFailure) {
            guard i < bytes.count, bytes[i] == c.asciiValue else { throw PostgresDecodeFailure("malformed timestamp '\(s)'") }
            i += 1
        }
        var year = try number(9)
        try expect("-"); let month = try number(2)
        try expect("-"); let day = try number(2)
        try expect(" "); let hour = try number(2)
        try expect(":"); let minute = try number(2)
        try expect(":"); let second = try number(2)
        var micros: Int64 = 0
        if i < bytes.count && bytes[i] == UInt8(ascii: ".") {
            i += 1
            let start = i
            micros = try number(6)
            for _ in 0..<(6 - (i - start)) { micros *= 10 }
        }
        var offsetSeconds: Int64 = 0
        if i < bytes.count {
            let sign: Int64 = bytes[i] == UInt8(ascii: "-") ? -1 : 1
            guard bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") else {
                throw PostgresDecodeFailure("malformed timestamp '\(s)'")
            }
            i += 1
            var off = try number(2) * 3600
            if i < bytes.count && bytes[i] == UInt8(ascii: ":") { i += 1; off += try number(2) * 60 }
            if i < bytes.count && bytes[i] == UInt8(ascii: ":") { i += 1; off += try number(2) }
            offsetSeconds = sign * off
        }
        guard i == bytes.count, (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61 else {
            throw PostgresDecodeFailure("malformed timestamp '\(s)'")
        }
        if bc { year = 1 - year }
        let days = Self.days(fromCivil: year, month, day)
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return PostgresTimestamp(microsecondsSince1970: secs * 1_000_000 + micros)
    }

    /// Days since 1970-01-01 for a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func days(fromCivil y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    static func civil(fromDays z0: Int64) -> (Int64, Int64, Int64) {
        let z = z0 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (yoe + era * 400 + (m <= 2 ? 1 : 0), m, d)
    }
}
