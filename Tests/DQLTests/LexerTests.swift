import Testing
@testable import DQL

@Suite struct LexerTests {
    func kinds(_ s: String) throws -> [TokenKind] { try Lexer.tokenize(s).map(\.kind) }

    @Test func lexer_punctuationAndOperators() throws {
        #expect(try kinds("( ) [ ] { } , . : * + - / % || = == != <> < <= > >=") == [
            .leftParen, .rightParen, .leftBracket, .rightBracket, .leftBrace, .rightBrace, .comma, .dot, .colon,
            .star, .plus, .minus, .slash, .percent, .concat, .equal, .equal, .notEqual, .notEqual, .less, .lessEqual,
            .greater, .greaterEqual, .endOfInput,
        ])
    }

    @Test func lexer_keywordsAreCaseInsensitiveAndContextualWordsAreIdentifiers() throws {
        let t = try Lexer.tokenize("select Documents `from` FrOm")
        #expect(t[0].kind == .keyword(.select))
        #expect(t[1].kind == .identifier && t[1].text == "Documents")
        #expect(t[2].kind == .quotedIdentifier && t[2].text == "from")
        #expect(t[3].kind == .keyword(.from))
    }

    @Test func lexer_stringsAndEscapes() throws {
        let t = try Lexer.tokenize(#"'it''s' "say \"hi\"" 'a\nb\u00e9\\' `a``b`"#)
        #expect(Array(t.map(\.text).prefix(4)) == ["it's", "say \"hi\"", "a\nbé\\", "a`b"])
        #expect(try Lexer.tokenize(#"'50\% \q'"#)[0].text == #"50\% \q"#)
    }

    @Test func lexer_numbersAndParameters() throws {
        let t = try Lexer.tokenize("12 1.5 2e10 3E-2 :name :_x1 5.x")
        #expect(t[0].kind == .number(isInteger: true))
        #expect(t[1].kind == .number(isInteger: false) && t[1].text == "1.5")
        #expect(t[2].kind == .number(isInteger: false))
        #expect(t[3].kind == .number(isInteger: false))
        #expect(t[4].kind == .parameter && t[4].text == "name")
        #expect(t[5].kind == .parameter && t[5].text == "_x1")
        #expect(t[6].text == "5" && t[7].kind == .dot && t[8].text == "x")
    }

    @Test func lexer_positionsCountLinesAndScalars() {
        // 'é' is not an identifier character: the error points at it, on line 3 column 3.
        do { _ = try Lexer.tokenize("-- c\nSELECT /* x */\n  é"); Issue.record("accepted") } catch {
            #expect(error.location.line == 3 && error.location.column == 3)
            #expect(error.found == "'é'")
        }
        do { _ = try Lexer.tokenize("'日本' é"); Issue.record("accepted") } catch {
            #expect(error.location.column == 6)
        }
    }

    @Test func lexer_errors() {
        let cases: [(String, Int, String)] = [
            ("'abc", 1, "a closing quote"), ("`abc", 1, "'`' to close the identifier"), ("/* x", 1, "'*/'"),
            ("1e", 1, "digits after the exponent"), ("12ab", 1, "a number"), ("a ! b", 3, "a token"),
            ("'\\ud800'", 2, "a Unicode scalar value (write the character itself)"),
        ]
        for (text, column, expected) in cases {
            do { _ = try Lexer.tokenize(text); Issue.record("accepted \(text)") } catch {
                #expect(error.location.column == column, "\(text): \(error)")
                #expect(error.expected == expected, "\(text): \(error)")
            }
        }
    }
}
