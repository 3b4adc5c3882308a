// Date functions over ISO 8601 / RFC 3339 strings and epoch milliseconds (proleptic Gregorian, UTC).
//
// Accepted input (RFC 3339 §5.6, plus a date alone and a space for 'T'):
//   YYYY-MM-DD
//   YYYY-MM-DD(T| )HH:MM[:SS[.fraction]][Z | +HH:MM | -HH:MM | +HHMM | -HHMM]
// A time without an offset is UTC. Output is always `YYYY-MM-DDTHH:MM:SS.sssZ`.
// Invalid dates give NULL. Units: millisecond, second, minute, hour, day, week, month, year
// (singular or plural, any case).

import Values

enum DateFunctions {
    static func call(_ name: String, _ a: [Value]) throws(DQLEvaluationError) -> Value? {
        switch name {
        case "date_to_epoch_ms":
            try Functions.arity(name, a, 1...1)
            guard case .string(let s) = a[0], let ms = parse(s) else { return .null }
            return .int(ms)
        case "epoch_ms_to_date":
            try Functions.arity(name, a, 1...1)
            guard let ms = a[0].int64Value, inRange(ms) else { return .null }
            return .string(format(milliseconds: ms))
        case "date_add":
            try Functions.arity(name, a, 3...3)
            guard case .string(let s) = a[0], let ms = parse(s), let n = a[1].int64Value,
                  case .string(let u) = a[2], let unit = Unit(u) else { return .null }
            guard let r = add(ms, n, unit), inRange(r) else { return .null }
            return .string(format(milliseconds: r))
        case "date_diff":
            try Functions.arity(name, a, 3...3)
            guard case .string(let s1) = a[0], case .string(let s2) = a[1], let t1 = parse(s1), let t2 = parse(s2),
                  case .string(let u) = a[2], let unit = Unit(u) else { return .null }
            return .int(diff(t1, t2, unit))
        case "date_part":
            try Functions.arity(name, a, 2...2)
            guard case .string(let s) = a[0], let ms = parse(s), case .string(let part) = a[1] else { return .null }
            let c = Civil(milliseconds: ms)
            switch part.lowercased() {
            case "year": return .int(c.year)
            case "month": return .int(c.month)
            case "day": return .int(c.day)
            case "hour": return .int(c.hour)
            case "minute": return .int(c.minute)
            case "second": return .int(c.second)
            case "millisecond": return .int(c.millisecond)
            case "dow": return .int((floorDiv(ms, 86_400_000) % 7 + 11) % 7)  // 0 = Sunday; 1970-01-01 was a Thursday
            case "doy": return .int(daysFromCivil(c.year, c.month, c.day) - daysFromCivil(c.year, 1, 1) + 1)
            default: return .null
            }
        case "date_trunc":
            try Functions.arity(name, a, 2...2)
            guard case .string(let s) = a[0], let ms = parse(s), case .string(let u) = a[1], let unit = Unit(u) else { return .null }
            var c = Civil(milliseconds: ms)
            switch unit {
            case .year: c = Civil(year: c.year, month: 1, day: 1)
            case .month: c = Civil(year: c.year, month: c.month, day: 1)
            case .week:
                let days = floorDiv(ms, 86_400_000)
                let monday = days - ((days % 7 + 10) % 7)  // ISO weeks start on Monday
                return .string(format(milliseconds: monday * 86_400_000))
            default:
                let step = unit.fixedMilliseconds ?? 1
                return .string(format(milliseconds: floorDiv(ms, step) * step))
            }
            return .string(format(milliseconds: c.milliseconds))
        default:
            return nil
        }
    }

    enum Unit {
        case millisecond, second, minute, hour, day, week, month, year

        init?(_ s: String) {
            var u = s.lowercased()
            if u.hasSuffix("s") { u.removeLast() }
            switch u {
            case "millisecond": self = .millisecond
            case "second": self = .second
            case "minute": self = .minute
            case "hour": self = .hour
            case "day": self = .day
            case "week": self = .week
            case "month": self = .month
            case "year": self = .year
            default: return nil
            }
        }

        var fixedMilliseconds: Int64? {
            switch self {
            case .millisecond: 1
            case .second: 1_000
            case .minute: 60_000
            case .hour: 3_600_000
            case .day: 86_400_000
            case .week: 604_800_000
            case .month, .year: nil
            }
        }
    }

    /// Supported instants: years 0000 through 9999.
    static let minMilliseconds: Int64 = -62_167_219_200_000
    static let maxMilliseconds: Int64 = 253_402_300_799_999
    static func inRange(_ ms: Int64) -> Bool { ms >= minMilliseconds && ms <= maxMilliseconds }

    static func add(_ ms: Int64, _ n: Int64, _ unit: Unit) -> Int64? {
        if let step = unit.fixedMilliseconds {
            let (p, o1) = n.multipliedReportingOverflow(by: step)
            let (r, o2) = ms.addingReportingOverflow(p)
            return o1 || o2 ? nil : r
        }
        guard Swift.abs(n) < 200_000 else { return nil }
        let c = Civil(milliseconds: ms)
        let months = c.year * 12 + (c.month - 1) + (unit == .year ? n * 12 : n)
        let year = floorDiv(months, 12), month = months - year * 12 + 1
        let day = min(c.day, daysInMonth(year, month))  // Jan 31 + 1 month = Feb 28/29
        let timeOfDay = ms - floorDiv(ms, 86_400_000) * 86_400_000
        return daysFromCivil(year, month, day) * 86_400_000 + timeOfDay
    }

    static func diff(_ t1: Int64, _ t2: Int64, _ unit: Unit) -> Int64 {
        if let step = unit.fixedMilliseconds { return (t2 - t1) / step }
        let a = Civil(milliseconds: t1), b = Civil(milliseconds: t2)
        var months = (b.year - a.year) * 12 + (b.month - a.month)
        // Count only whole months: step back when the later date has not reached the day/time of the earlier.
        let restA = t1 - daysFromCivil(a.year, a.month, 1) * 86_400_000
        let restB = t2 - daysFromCivil(b.year, b.month, 1) * 86_400_000
        if months > 0 && restB < restA { months -= 1 }
        if months < 0 && restB > restA { months += 1 }
        return unit == .year ? months / 12 : months
    }

    static func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
        let q = a / b
        return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
    }

    static func isLeap(_ y: Int64) -> Bool { y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) }

    static func daysInMonth(_ y: Int64, _ m: Int64) -> Int64 {
        switch m {
        case 2: isLeap(y) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a civil date (H. Hinnant, "chrono-compatible low-level date algorithms").
    static func daysFromCivil(_ y0: Int64, _ m: Int64, _ d: Int64) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = floorDiv(y, 400)
        let yoe = y - era * 400
        let doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    struct Civil {
        var year: Int64, month: Int64, day: Int64
        var hour: Int64 = 0, minute: Int64 = 0, second: Int64 = 0, millisecond: Int64 = 0

        init(year: Int64, month: Int64, day: Int64) {
            self.year = year
            self.month = month
            self.day = day
        }

        init(milliseconds ms: Int64) {
            let days = floorDiv(ms, 86_400_000)
            var rest = ms - days * 86_400_000
            let z = days + 719_468
            let era = floorDiv(z, 146_097)
            let doe = z - era * 146_097
            let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
            let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
            let mp = (5 * doy + 2) / 153
            day = doy - (153 * mp + 2) / 5 + 1
            month = mp < 10 ? mp + 3 : mp - 9
            year = yoe + era * 400 + (month <= 2 ? 1 : 0)
            hour = rest / 3_600_000; rest %= 3_600_000
            minute = rest / 60_000; rest %= 60_000
            second = rest / 1000
            millisecond = rest % 1000
        }

        var milliseconds: Int64 {
            daysFromCivil(year, month, day) * 86_400_000 + hour * 3_600_000 + minute * 60_000 + second * 1000 + millisecond
        }
    }

    static func format(milliseconds ms: Int64) -> String {
        let c = Civil(milliseconds: ms)
        func pad(_ v: Int64, _ n: Int) -> String {
            let s = String(v)
            return s.count >= n ? s : String(repeating: "0", count: n - s.count) + s
        }
        return "\(pad(c.year, 4))-\(pad(c.month, 2))-\(pad(c.day, 2))T\(pad(c.hour, 2)):\(pad(c.minute, 2)):\(pad(c.second, 2)).\(pad(c.millisecond, 3))Z"
    }

    /// Parses an RFC 3339 timestamp or a date into epoch milliseconds; nil if malformed.
    static func parse(_ s: String) -> Int64? {
        let b = Array(s.utf8)
        var i = 0
        func digits(_ n: Int) -> Int64? {
            guard i + n <= b.count else { return nil }
            var v: Int64 = 0
            for k in 0..<n {
                let d = b[i + k] &- UInt8(ascii: "0")
                guard d < 10 else { return nil }
                v = v * 10 + Int64(d)
            }
            i += n
            return v
        }
        func skip(_ c: Character) -> Bool {
            if i < b.count, b[i] == c.asciiValue { i += 1; return true }
            return false
        }
        guard let year = digits(4), skip("-"), let month = digits(2), skip("-"), let day = digits(2),
              (1...12).contains(month), day >= 1, day <= daysInMonth(year, month) else { return nil }
        var ms = daysFromCivil(year, month, day) * 86_400_000
        if i == b.count { return ms }
        guard skip("T") || skip("t") || skip(" "), let hour = digits(2), skip(":"), let minute = digits(2),
              hour < 24, minute < 60 else { return nil }
        ms += hour * 3_600_000 + minute * 60_000
        if skip(":") {
            guard let second = digits(2), second < 60 else { return nil }
            ms += second * 1000
            if skip(".") {
                var scale: Int64 = 100, any = false
                while i < b.count, b[i] &- UInt8(ascii: "0") < 10 {
                    ms += Int64(b[i] - UInt8(ascii: "0")) * scale
                    scale /= 10
                    i += 1
                    any = true
                }
                guard any else { return nil }
            }
        }
        if i == b.count || skip("Z") || skip("z") { return i == b.count ? ms : nil }
        guard i < b.count, b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") else { return nil }
        let sign: Int64 = b[i] == UInt8(ascii: "+") ? 1 : -1
        i += 1
        guard let oh = digits(2), oh < 24 else { return nil }
        _ = skip(":")
        guard let om = digits(2), om < 60, i == b.count else { return nil }
        return ms - sign * (oh * 3_600_000 + om * 60_000)
    }
}
