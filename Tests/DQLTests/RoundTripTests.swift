import Testing
import TestRandomness
import Values
@testable import DQL

typealias SplitMix64 = SeededRandom

/// Builds random ASTs of the shapes the parser produces.
struct RandomAST {
    var rng: SplitMix64

    static let names = ["a", "b", "color", "_id", "count", "x y", "order", "select", "COLLECTION", "a`b", "日本", "", "ALL", "value"]
    static let functions = ["lower", "coalesce", "contains", "abs", "concat", "array_length", "type", "now"]

    mutating func name() -> String { Self.names[rng.below(Self.names.count)] }

    mutating func path() -> Path {
        var p = Path(name())
        for _ in 0..<rng.below(3) { p.components.append(rng.chance(70) ? .field(name()) : .index(rng.below(10))) }
        return p
    }

    mutating func literal() -> Value {
        switch rng.below(7) {
        case 0: return .null
        case 1: return .bool(rng.chance(50))
        case 2: return .int(Int64(bitPattern: rng.next()) >> rng.below(64))
        case 3:
            let d = Double(bitPattern: rng.next())
            return .double(d.isFinite ? d : 0.25)
        case 4: return .int(Int64.min)
        default:
            let pool: [String] = ["", "it's", "a\\b", "line\nbreak", "tab\t", "é😀", "\u{1}", "%_", "\"q\""]
            return .string(pool[rng.below(pool.count)])
        }
    }

    mutating func expression(_ depth: Int) -> Expression {
        if depth <= 0 || rng.chance(25) {
            switch rng.below(3) {
            case 0: return .literal(literal())
            case 1: return .parameter(["p", "arg_1", "X"][rng.below(3)])
            default: return .path(path())
            }
        }
        let d = depth - 1
        switch rng.below(17) {
        case 0: return .unary(.not, expression(d))
        case 1: return .unary(rng.chance(50) ? .negate : .plus, expression(d))
        case 2, 3, 4:
            let ops = BinaryOperator.allCases
            return .binary(ops[rng.below(ops.count)], expression(d), expression(d))
        case 5: return .between(expression(d), low: expression(d), high: expression(d), negated: rng.chance(50))
        case 6: return .inList(expression(d), (0..<rng.below(4)).map { _ in expression(d) }, negated: rng.chance(50))
        case 7:
            let arrays: [Expression] = [.parameter("list"), .path(path()), .array([expression(d)])]
            return .inArray(expression(d), arrays[rng.below(arrays.count)], negated: rng.chance(50))
        case 8:
            return .like(expression(d), pattern: expression(d), escape: rng.chance(30) ? .literal("!") : nil,
                         caseInsensitive: rng.chance(50), negated: rng.chance(50))
        case 9: return .isNull(expression(d), negated: rng.chance(50))
        case 10: return .isMissing(expression(d), negated: rng.chance(50))
        case 11: return .call(Self.functions[rng.below(Self.functions.count)], (0..<rng.below(3)).map { _ in expression(d) })
        case 12:
            let f = AggregateFunction.allCases[rng.below(5)]
            if f == .count, rng.chance(40) { return .aggregate(.count, nil, distinct: false) }
            return .aggregate(f, expression(d), distinct: rng.chance(30))
        case 13: return .array((0..<rng.below(3)).map { _ in expression(d) })
        case 14: return .object((0..<rng.below(3)).map { _ in ObjectEntry(name(), expression(d)) })
        case 15:
            // `.access` never wraps a plain path (the parser extends the path instead).
            var base = expression(d)
            if case .path = base { base = .parameter("doc") }
            return .access(base, rng.chance(60) ? .field(name()) : .index(rng.below(5)))
        default: return .path(path())
        }
    }

    mutating func collection() -> CollectionReference {
        if rng.chance(70) { return CollectionReference(name()) }
        let types = FieldType.allCases
        return CollectionReference(name(), declarations: (0...rng.below(3)).map { _ in FieldDeclaration(path(), types[rng.below(types.count)]) })
    }

    mutating func ordering() -> [OrderingTerm] {
        (0..<rng.below(3)).map { _ in
            let desc = rng.chance(40)
            return OrderingTerm(expression(2), descending: desc, explicitDirection: desc || rng.chance(50))
        }
    }

    mutating func statement(allowExplain: Bool = true) -> Statement {
        switch rng.below(allowExplain ? 11 : 10) {
        case 0, 1, 2:
            var projections: [Projection] = []
            for _ in 0...rng.below(3) {
                projections.append(rng.chance(20) ? .all : .expression(expression(3), alias: rng.chance(40) ? name() : nil))
            }
            var s = SelectStatement(projections: projections, from: collection())
            s.distinct = rng.chance(20)
            if rng.chance(70) { s.filter = expression(4) }
            if rng.chance(20) { s.groupBy = (0...rng.below(2)).map { _ in expression(2) } }
            if rng.chance(20) { s.having = expression(2) }
            s.orderBy = ordering()
            if rng.chance(40) { s.limit = expression(1) }
            if rng.chance(30) { s.offset = expression(1) }
            return .select(s)
        case 3:
            let policies: [ConflictPolicy?] = [nil] + ConflictPolicy.allCases
            return .insert(InsertStatement(collection: collection(), initial: rng.chance(30),
                documents: (0...rng.below(2)).map { _ in expression(2) }, onIdConflict: policies[rng.below(policies.count)]))
        case 4:
            var u = UpdateStatement(collection: collection())
            for _ in 0..<rng.below(3) {
                let ops: [CounterOperation] = [.increment(expression(2), legacy: rng.chance(50)), .restart(nil), .restart(expression(2))]
                u.apply.append(CounterUpdate(path(), ops[rng.below(3)]))
            }
            for _ in 0..<rng.below(3) { u.set.append(Assignment(path(), expression(3))) }
            if u.apply.isEmpty && u.set.isEmpty || rng.chance(30) { u.unset = (0...rng.below(2)).map { _ in path() } }
            if rng.chance(60) { u.filter = expression(3) }
            u.orderBy = ordering()
            if rng.chance(30) { u.limit = expression(1) }
            if rng.chance(20) { u.offset = expression(1) }
            return .update(u)
        case 5: return .delete(RemoveStatement(collection: collection(), filter: rng.chance(70) ? expression(3) : nil))
        case 6: return .evict(RemoveStatement(collection: collection(), filter: rng.chance(70) ? expression(3) : nil))
        case 7:
            switch rng.below(3) {
            case 0: return .system(.set(name(), expression(1)))
            case 1: return .system(.reset(rng.chance(50) ? nil : name()))
            default: return .system(.show(rng.chance(50) ? nil : name()))
            }
        case 8: return .createIndex(CreateIndexStatement(ifNotExists: rng.chance(50), name: name(), collection: name(), paths: (0...rng.below(2)).map { _ in path() }))
        case 9: return .dropIndex(DropIndexStatement(ifExists: rng.chance(50), name: name(), collection: rng.chance(50) ? name() : nil))
        default: return .explain(statement(allowExplain: false))
        }
    }
}

@Suite struct RoundTripTests {
    @Test func parsePrintParse_isIdentityOnRandomASTs() throws {
        var gen = RandomAST(rng: SplitMix64(seed: 0xD01))
        for _ in 0..<3000 {
            let ast = gen.statement()
            let text = Printer.print(ast)
            let reparsed: Statement
            do { reparsed = try DQL.parse(text) } catch {
                Issue.record("printed text does not parse: \(error)\n\(text)")
                return
            }
            #expect(reparsed == ast, "\(text)")
            if reparsed != ast { return }
        }
    }

    @Test(arguments: [
        "SELECT * FROM cars WHERE color = 'blue' AND (year > 2000 OR NOT electric) ORDER BY year DESC LIMIT 3",
        "SELECT COUNT(*) AS n, AVG(DISTINCT price) FROM `my cars` GROUP BY make HAVING n > 1",
        "INSERT INTO COLLECTION cars (p MAP) INITIAL DOCUMENTS ({'_id': 'x', 'p': {'a': [1, 2.5, NULL]}}) ON ID CONFLICT DO UPDATE",
        "UPDATE cars APPLY v INCREMENT BY -1 SET a.b = -(x * 2) UNSET c WHERE NOT d IS MISSING",
        "SELECT * FROM c WHERE - -1 = --comment\n1 AND a NOT LIKE 'x\\%' AND b LIKE 'y!_' ESCAPE '!'",
    ])
    func parsePrintParse_examples(_ text: String) throws {
        let ast = try DQL.parse(text)
        #expect(try DQL.parse(Printer.print(ast)) == ast, "\(Printer.print(ast))")
    }
}

@Suite struct FuzzRegressionTests {
    /// Crashers found by Fuzz/DQLParse, kept as regression cases: each must parse, print, and parse
    /// back to the same statement (or fail to parse with a positioned error).
    static let crashers = [
        // 75 nested unary `+`: printed as `+(+(...))`, the parentheses pushed the re-parse over the nesting limit.
        "UPDATE OCLLECTIO SET m.a =Closed=IntISSI222+++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++++22++22+2+I22222++22+2+2++++++++222.r22222222222222222854391784335.r22+++22222222.r22222222222222222222222222222222222222222222222222NG",
        "SELECT * FROM c WHERE " + String(repeating: "- ", count: 120) + "x = 1",
    ]

    @Test(arguments: crashers)
    func crasher_roundTrips(_ text: String) throws {
        let ast = try DQL.parse(text)
        #expect(try DQL.parse(Printer.print(ast)) == ast)
    }
}

@Suite struct TokenSoupTests {
    /// Random sequences of DQL tokens and stray characters: always a statement or a positioned
    /// syntax error, never a crash or a hang.
    @Test func tokenSoup_alwaysParsesOrFailsWithPosition() {
        let pieces = [
            "SELECT", "FROM", "WHERE", "INSERT", "INTO", "DOCUMENTS", "UPDATE", "SET", "APPLY", "UNSET", "DELETE",
            "EVICT", "ALTER", "SYSTEM", "SHOW", "ALL", "CREATE", "DROP", "INDEX", "EXPLAIN", "ON", "ID", "CONFLICT",
            "DO", "NOTHING", "AND", "OR", "NOT", "IN", "IS", "NULL", "MISSING", "LIKE", "BETWEEN", "GROUP", "BY",
            "ORDER", "LIMIT", "OFFSET", "COLLECTION", "MAP", "COUNT", "(", ")", "[", "]", "{", "}", ",", ".", ":",
            "*", "+", "-", "/", "%", "||", "=", "!=", "<", ">=", "'s'", "\"t\"", "`q`", "1", "2.5", "1e3", ":p",
            "a", "b.c", "--x\n", "/*c*/", ";", "'", "`", "!", "é", "\\", "0x", "DISTINCT", "AS", "INCREMENT", "RESTART",
        ]
        var rng = SplitMix64(seed: 7)
        for _ in 0..<20_000 {
            var text = ""
            for _ in 0..<rng.below(14) {
                text += pieces[rng.below(pieces.count)]
                if rng.chance(80) { text += " " }
            }
            do {
                _ = try DQL.parse(text)
            } catch {
                #expect(error.location.line >= 1 && error.location.column >= 1)
                #expect(error.location.offset <= text.utf8.count)
                #expect(!error.expected.isEmpty && !error.found.isEmpty)
            }
        }
    }
}
