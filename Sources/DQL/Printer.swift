// AST -> DQL text. The output re-parses to an equal AST (tested over random trees): parentheses are
// added exactly where precedence needs them, names are back-quoted when they are not plain
// identifiers or could be read as a keyword, and strings use single quotes with `''` and backslash
// escapes.

import Quoting
import Values

extension Statement: CustomStringConvertible {
    public var description: String { Printer.print(self) }
}

extension Expression: CustomStringConvertible {
    public var description: String { Printer.print(self) }
}

public enum Printer {
    /// Words with a meaning somewhere in the grammar; a name spelled like one is back-quoted.
    static let contextualWords: Set<String> = [
        "COLLECTION", "DOCUMENTS", "VALUES", "INITIAL", "ALL", "IF", "EXISTS", "INDEX", "SYSTEM", "ALTER",
        "RESET", "SHOW", "CREATE", "DROP", "EXPLAIN", "TO", "ID", "CONFLICT", "DO", "NOTHING", "FAIL",
        "UPDATE_LOCAL_DIFF", "INCREMENT", "PN_INCREMENT", "RESTART", "WITH",
    ]

    public static func print(_ statement: Statement) -> String {
        var out = ""
        write(statement, into: &out)
        return out
    }

    public static func print(_ expression: Expression) -> String {
        var out = ""
        write(expression, minimum: 0, into: &out)
        return out
    }

    /// A name as it must be written: bare when it is a plain identifier, back-quoted otherwise.
    public static func name(_ s: String) -> String {
        if isPlainIdentifier(s), Keyword.lookup(Substring(s)) == nil, !contextualWords.contains(s.uppercased()) { return s }
        return Quote.dqlIdentifier(s)
    }

    static func isPlainIdentifier(_ s: String) -> Bool {
        guard let first = s.utf8.first else { return false }
        func letter(_ b: UInt8) -> Bool { (b | 0x20 >= 0x61 && b | 0x20 <= 0x7A) || b == 0x5F }
        return letter(first) && s.utf8.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }

    public static func stringLiteral(_ s: String) -> String { Quote.dqlString(s) }

    static func write(_ collection: CollectionReference, into out: inout String) {
        guard let declarations = collection.declarations else { out += name(collection.name); return }
        out += "COLLECTION " + name(collection.name) + " ("
        out += declarations.map { path($0.path) + " " + $0.type.rawValue }.joined(separator: ", ")
        out += ")"
    }

    public static func path(_ p: Path) -> String {
        var s = name(p.root)
        for c in p.components { s += component(c) }
        return s
    }

    static func component(_ c: PathComponent) -> String {
        switch c {
        case .field(let f): "." + name(f)
        case .index(let i): "[\(i)]"
        }
    }

    static func write(_ s: Statement, into out: inout String) {
        switch s {
        case .select(let q): writeSelect(q, into: &out)
        case .insert(let i):
            out += "INSERT INTO "
            write(i.collection, into: &out)
            out += i.initial ? " INITIAL DOCUMENTS " : " DOCUMENTS "
            out += i.documents.map { "(" + print($0) + ")" }.joined(separator: ", ")
            if let p = i.onIdConflict { out += " ON ID CONFLICT " + p.rawValue }
        case .update(let u):
            out += "UPDATE "
            write(u.collection, into: &out)
            if !u.apply.isEmpty {
                out += " APPLY " + u.apply.map { c in
                    switch c.operation {
                    case .increment(let e, let legacy): path(c.path) + (legacy ? " PN_INCREMENT BY " : " INCREMENT BY ") + print(e)
                    case .restart(nil): path(c.path) + " RESTART"
                    case .restart(let e?): path(c.path) + " RESTART WITH " + print(e)
                    }
                }.joined(separator: ", ")
            }
            if !u.set.isEmpty { out += " SET " + u.set.map { path($0.path) + " = " + print($0.value) }.joined(separator: ", ") }
            if !u.unset.isEmpty { out += " UNSET " + u.unset.map(path).joined(separator: ", ") }
            writeTail(filter: u.filter, orderBy: u.orderBy, limit: u.limit, offset: u.offset, into: &out)
        case .delete(let r), .evict(let r):
            out += (s.queryType == "delete" ? "DELETE FROM " : "EVICT FROM ")
            write(r.collection, into: &out)
            if let f = r.filter { out += " WHERE " + print(f) }
        case .system(.set(let n, let e)): out += "ALTER SYSTEM SET " + name(n) + " = " + print(e)
        case .system(.reset(let n)): out += "ALTER SYSTEM RESET " + (n.map(name) ?? "ALL")
        case .system(.show(let n)): out += "SHOW " + (n.map(name) ?? "ALL")
        case .createIndex(let c):
            out += "CREATE INDEX " + (c.ifNotExists ? "IF NOT EXISTS " : "") + name(c.name) + " ON " + name(c.collection)
            out += " (" + c.paths.map(path).joined(separator: ", ") + ")"
        case .dropIndex(let d):
            out += "DROP INDEX " + (d.ifExists ? "IF EXISTS " : "") + name(d.name)
            if let c = d.collection { out += " ON " + name(c) }
        case .explain(let inner):
            out += "EXPLAIN "
            write(inner, into: &out)
        }
    }

    static func writeSelect(_ q: SelectStatement, into out: inout String) {
        out += q.distinct ? "SELECT DISTINCT " : "SELECT "
        out += q.projections.map { p in
            switch p {
            case .all: "*"
            case .expression(let e, nil): print(e)
            case .expression(let e, let a?): print(e) + " AS " + name(a)
            }
        }.joined(separator: ", ")
        out += " FROM "
        write(q.from, into: &out)
        if let f = q.filter { out += " WHERE " + print(f) }
        if !q.groupBy.isEmpty { out += " GROUP BY " + q.groupBy.map { print($0) }.joined(separator: ", ") }
        if let h = q.having { out += " HAVING " + print(h) }
        writeTail(filter: nil, orderBy: q.orderBy, limit: q.limit, offset: q.offset, into: &out)
    }

    static func writeTail(filter: Expression?, orderBy: [OrderingTerm], limit: Expression?, offset: Expression?, into out: inout String) {
        if let f = filter { out += " WHERE " + print(f) }
        if !orderBy.isEmpty {
            out += " ORDER BY " + orderBy.map { t in
                print(t.expression) + (t.descending ? " DESC" : t.explicitDirection ? " ASC" : "")
            }.joined(separator: ", ")
        }
        if let l = limit { out += " LIMIT " + print(l) }
        if let o = offset { out += " OFFSET " + print(o) }
    }

    /// Precedence of an expression's outermost operator (higher binds tighter).
    static func precedence(_ e: Expression) -> Int {
        switch e {
        case .binary(let op, _, _): op.precedence
        case .unary(.not, _): 3
        case .between, .inList, .inArray, .like, .isNull, .isMissing: 4
        case .unary: 8
        case .literal(.int(let i)) where i < 0: 8
        case .literal(.double(let d)) where d.sign == .minus: 8
        default: 9
        }
    }

    static func write(_ e: Expression, minimum: Int, into out: inout String) {
        if precedence(e) < minimum {
            out += "("
            write(e, minimum: 0, into: &out)
            out += ")"
            return
        }
        switch e {
        case .literal(let v): writeLiteral(v, into: &out)
        case .parameter(let n): out += ":" + n
        case .path(let p): out += path(p)
        case .access(let base, let c):
            write(base, minimum: 9, into: &out)
            out += component(c)
        case .array(let items):
            out += "[" + items.map { print($0) }.joined(separator: ", ") + "]"
        case .object(let entries):
            out += "{" + entries.map { stringLiteral($0.key) + ": " + print($0.value) }.joined(separator: ", ") + "}"
        case .unary(.not, let x):
            out += "NOT "
            write(x, minimum: 3, into: &out)
        case .unary(let op, let x):
            out += op.rawValue
            var operand = ""
            write(x, minimum: 8, into: &operand)
            // `-5` would read back as a literal: parenthesise an operand that starts with a digit.
            // `--` starts a comment: separate a nested sign with a space (not parentheses, which
            // would count against the nesting limit when the text is parsed again).
            if let first = operand.utf8.first, first >= 0x30 && first <= 0x39 {
                out += "(" + operand + ")"
            } else if let first = operand.utf8.first, first == UInt8(ascii: "-") || first == UInt8(ascii: "+") {
                out += " " + operand
            } else {
                out += operand
            }
        case .binary(let op, let l, let r):
            let p = op.precedence
            let comparison = p == 4
            write(l, minimum: comparison ? 5 : p, into: &out)
            out += " " + op.rawValue + " "
            write(r, minimum: comparison ? 5 : p + 1, into: &out)
        case .between(let x, let lo, let hi, let negated):
            write(x, minimum: 5, into: &out)
            out += negated ? " NOT BETWEEN " : " BETWEEN "
            write(lo, minimum: 5, into: &out)
            out += " AND "
            write(hi, minimum: 5, into: &out)
        case .inList(let x, let items, let negated):
            write(x, minimum: 5, into: &out)
            out += (negated ? " NOT IN (" : " IN (") + items.map { print($0) }.joined(separator: ", ") + ")"
        case .inArray(let x, let a, let negated):
            write(x, minimum: 5, into: &out)
            out += negated ? " NOT IN " : " IN "
            // The parser reads `IN (` as a list, so an array operand never starts with '('.
            write(a, minimum: 5, into: &out)
        case .like(let x, let pattern, let escape, let insensitive, let negated):
            write(x, minimum: 5, into: &out)
            out += (negated ? " NOT " : " ") + (insensitive ? "ILIKE " : "LIKE ")
            write(pattern, minimum: 5, into: &out)
            if let esc = escape {
                out += " ESCAPE "
                write(esc, minimum: 5, into: &out)
            }
        case .isNull(let x, let negated):
            write(x, minimum: 5, into: &out)
            out += negated ? " IS NOT NULL" : " IS NULL"
        case .isMissing(let x, let negated):
            write(x, minimum: 5, into: &out)
            out += negated ? " IS NOT MISSING" : " IS MISSING"
        case .call(let n, let args):
            out += n + "(" + args.map { print($0) }.joined(separator: ", ") + ")"
        case .aggregate(let f, nil, _):
            out += f.rawValue + "(*)"
        case .aggregate(let f, let arg?, let distinct):
            out += f.rawValue + (distinct ? "(DISTINCT " : "(") + print(arg) + ")"
        }
    }

    static func writeLiteral(_ v: Value, into out: inout String) {
        switch v {
        case .null: out += "NULL"
        case .bool(let b): out += b ? "TRUE" : "FALSE"
        case .int(let i): out += String(i)
        case .double(let d): out += d.isFinite ? d.description : "NULL"
        case .string(let s): out += stringLiteral(s)
        case .array(let a):
            out += "["
            for (k, x) in a.enumerated() {
                if k > 0 { out += ", " }
                writeLiteral(x, into: &out)
            }
            out += "]"
        case .object(let o):
            out += "{"
            for (k, key) in JSONWriter.sortedKeys(o).enumerated() {
                if k > 0 { out += ", " }
                out += stringLiteral(key) + ": "
                if let x = o[key] { writeLiteral(x, into: &out) }
            }
            out += "}"
        }
    }
}
