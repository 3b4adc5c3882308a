import Testing
import Values
@testable import DQL

@Suite struct PrinterTests {
    @Test func names_areQuotedOnlyWhenNeeded() {
        #expect(Printer.name("color") == "color")
        #expect(Printer.name("count") == "count")
        #expect(Printer.name("select") == "`select`")
        #expect(Printer.name("Collection") == "`Collection`")
        #expect(Printer.name("a b") == "`a b`")
        #expect(Printer.name("a`b") == "`a``b`")
        #expect(Printer.name("") == "``")
        #expect(Printer.name("1abc") == "`1abc`")
        #expect(Printer.path(Path("a", [.field("order"), .index(3), .field("x")])) == "a.`order`[3].x")
    }

    @Test func strings_escape() {
        #expect(Printer.stringLiteral("it's\n\\") == "'it''s\\n\\\\'")
        #expect(Printer.stringLiteral("\u{1}é") == "'\\u0001é'")
    }

    @Test func expressions_parenthesiseByPrecedence() {
        let a = Expression.path(Path("a")), b = Expression.path(Path("b")), c = Expression.path(Path("c"))
        #expect(Printer.print(.binary(.subtract, a, .binary(.subtract, b, c))) == "a - (b - c)")
        #expect(Printer.print(.binary(.subtract, .binary(.subtract, a, b), c)) == "a - b - c")
        #expect(Printer.print(.binary(.multiply, .binary(.add, a, b), c)) == "(a + b) * c")
        #expect(Printer.print(.binary(.and, .binary(.or, a, b), c)) == "(a OR b) AND c")
        #expect(Printer.print(.unary(.not, .binary(.equal, a, b))) == "NOT a = b")
        #expect(Printer.print(.binary(.equal, .isNull(a, negated: false), .literal(true))) == "(a IS NULL) = TRUE")
        #expect(Printer.print(.unary(.negate, .literal(5))) == "-(5)")
        #expect(Printer.print(.unary(.negate, .unary(.negate, a))) == "- -a")
        #expect(Printer.print(.unary(.plus, .literal(-5))) == "+ -5")
        #expect(Printer.print(.literal(-5)) == "-5")
        #expect(Printer.print(.access(.call("f", []), .field("x"))) == "f().x")
        #expect(Printer.print(.access(.binary(.concat, a, b), .index(0))) == "(a || b)[0]")
    }

    @Test func statements_printCanonically() throws {
        let text = "select   distinct a as `x y` from COLLECTION cars (p map) where a=1 order by a asc limit 2"
        #expect(Printer.print(try DQL.parse(text)) == "SELECT DISTINCT a AS `x y` FROM COLLECTION cars (p MAP) WHERE a = 1 ORDER BY a ASC LIMIT 2")
        #expect(Printer.print(try DQL.parse("insert into c values (:d) on id conflict do fail")) == "INSERT INTO c DOCUMENTS (:d) ON ID CONFLICT FAIL")
    }
}
