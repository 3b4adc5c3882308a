// Expression grammar, lowest precedence first:
//
//   expr       = and { OR and }
//   and        = not { AND not }
//   not        = NOT not | predicate
//   predicate  = sum [ compare sum
//                    | [NOT] BETWEEN sum AND sum
//                    | [NOT] IN ( '(' expr {, expr} ')' | sum )
//                    | [NOT] (LIKE | ILIKE) sum [ESCAPE sum]
//                    | IS [NOT] (NULL | MISSING) ]
//   sum        = term-chains by precedence: || (5), + - (6), * / % (7), all left-associative
//   unary      = ('-' | '+') unary | postfix
//   postfix    = primary { '.' name | '[' integer ']' | '[' string ']' }
//   primary    = literal | :param | name | name '(' args ')' | '(' expr ')' | '[' ... ']' | '{' ... '}'

import Values

extension Parser {
    mutating func enter() throws(DQLSyntaxError) {
        depth += 1
        guard depth <= limits.maxExpressionDepth else {
            throw error(expected: "a less deeply nested expression (limit \(limits.maxExpressionDepth))")
        }
    }

    mutating func parseExpression() throws(DQLSyntaxError) -> Expression {
        try enter()
        defer { depth -= 1 }
        var left = try parseAnd()
        let base = depth
        while skip(.or) {
            try enter()
            left = .binary(.or, left, try parseAnd())
        }
        depth = base
        return left
    }

    mutating func parseAnd() throws(DQLSyntaxError) -> Expression {
        let base = depth
        var left = try parseNot()
        while skip(.and) {
            try enter()
            left = .binary(.and, left, try parseNot())
        }
        depth = base
        return left
    }

    mutating func parseNot() throws(DQLSyntaxError) -> Expression {
        if skip(.not) {
            try enter()
            defer { depth -= 1 }
            return .unary(.not, try parseNot())
        }
        return try parsePredicate()
    }

    mutating func parsePredicate() throws(DQLSyntaxError) -> Expression {
        let left = try parseBinary(minimum: 5)
        if let op = Self.comparison(current.kind) {
            advance()
            return .binary(op, left, try parseBinary(minimum: 5))
        }
        if skip(.is) {
            let negated = skip(.not)
            if skip(.null) { return .isNull(left, negated: negated) }
            if skip(.missing) { return .isMissing(left, negated: negated) }
            throw error(expected: negated ? "NULL or MISSING" : "NOT, NULL or MISSING")
        }
        var negated = false
        if at(.not) {
            switch peek().kind {
            case .keyword(.between), .keyword(.in), .keyword(.like), .keyword(.ilike):
                advance()
                negated = true
            default:
                return left
            }
        }
        if skip(.between) {
            let low = try parseBinary(minimum: 5)
            try expect(.and)
            return .between(left, low: low, high: try parseBinary(minimum: 5), negated: negated)
        }
        if skip(.in) {
            if skip(.leftParen) {
                var items: [Expression] = []
                if current.kind != .rightParen {
                    repeat { items.append(try parseExpression()) } while skip(.comma)
                }
                try expect(.rightParen, "',' or ')'")
                return .inList(left, items, negated: negated)
            }
            return .inArray(left, try parseBinary(minimum: 5), negated: negated)
        }
        if at(.like) || at(.ilike) {
            let insensitive = advance().kind == .keyword(.ilike)
            let pattern = try parseBinary(minimum: 5)
            let escape = skip(.escape) ? try parseBinary(minimum: 5) : nil
            return .like(left, pattern: pattern, escape: escape, caseInsensitive: insensitive, negated: negated)
        }
        return left
    }

    static func comparison(_ kind: TokenKind) -> BinaryOperator? {
        switch kind {
        case .equal: .equal
        case .notEqual: .notEqual
        case .less: .less
        case .lessEqual: .lessEqual
        case .greater: .greater
        case .greaterEqual: .greaterEqual
        default: nil
        }
    }

    static func arithmetic(_ kind: TokenKind) -> BinaryOperator? {
        switch kind {
        case .concat: .concat
        case .plus: .add
        case .minus: .subtract
        case .star: .multiply
        case .slash: .divide
        case .percent: .modulo
        default: nil
        }
    }

    /// Precedence climbing over the left-associative operators with precedence >= `minimum`.
    mutating func parseBinary(minimum: Int) throws(DQLSyntaxError) -> Expression {
        let base = depth
        var left = try parseUnary()
        while let op = Self.arithmetic(current.kind), op.precedence >= minimum {
            advance()
            try enter()
            left = .binary(op, left, try parseBinary(minimum: op.precedence + 1))
        }
        depth = base
        return left
    }

    mutating func parseUnary() throws(DQLSyntaxError) -> Expression {
        if current.kind == .minus || current.kind == .plus {
            let negate = advance().kind == .minus
            if negate, case .number = current.kind {
                // Fold the sign into the literal so the most negative Int64 is exact.
                let token = advance()
                return try postfix(.literal(try number(token, negative: true)))
            }
            try enter()
            defer { depth -= 1 }
            return .unary(negate ? .negate : .plus, try parseUnary())
        }
        return try postfix(try parsePrimary())
    }

    func number(_ token: Token, negative: Bool) throws(DQLSyntaxError) -> Value {
        let text = negative ? "-" + token.text : token.text
        if case .number(isInteger: true) = token.kind, let i = Int64(text) { return .int(i) }
        guard let d = Double(text), d.isFinite else {
            throw DQLSyntaxError(location: token.location, found: "'\(text)'", expected: "a number within the range of a double")
        }
        return .double(d)
    }

    mutating func postfix(_ base: Expression) throws(DQLSyntaxError) -> Expression {
        var e = base
        var steps = 0
        while true {
            let component: PathComponent
            if skip(.dot) {
                switch current.kind {
                case .identifier, .quotedIdentifier, .keyword: component = .field(advance().text)
                default: throw error(expected: "a field name after '.'")
                }
            } else if skip(.leftBracket) {
                let token = current
                switch token.kind {
                case .string: component = .field(try fieldName(advance()))
                case .number(isInteger: true):
                    guard let i = Int(token.text) else { throw error(expected: "an array index that fits 64 bits") }
                    advance()
                    component = .index(i)
                default: throw error(expected: "an array index or a quoted field name")
                }
                try expect(.rightBracket, "']'")
            } else {
                return e
            }
            steps += 1
            guard steps <= limits.maxPathSteps else {
                throw error(expected: "a path of at most \(limits.maxPathSteps) steps")
            }
            if case .path(var p) = e {
                p.components.append(component)
                e = .path(p)
            } else {
                e = .access(e, component)
            }
        }
    }

    /// A string literal used as a field name (`a['b']`, an object literal's key): the same rules
    /// as a quoted identifier (NFC, no NUL).
    mutating func fieldName(_ token: Token) throws(DQLSyntaxError) -> String {
        if token.kind == .string, let problem = NameRules.problem(token.text) {
            throw DQLSyntaxError(location: token.location, found: "a name that \(problem)", expected: "a field name in Unicode NFC without U+0000")
        }
        return token.text
    }

    /// A path for SET, UNSET, APPLY, CREATE INDEX and type declarations: a name and steps.
    mutating func parsePath() throws(DQLSyntaxError) -> Path {
        let root = try parseName("a field name")
        guard case .path(let p) = try postfix(.path(Path(root))) else { throw error(expected: "a field path") }
        return p
    }

    mutating func parsePrimary() throws(DQLSyntaxError) -> Expression {
        let token = current
        switch token.kind {
        case .number:
            advance()
            return .literal(try number(token, negative: false))
        case .string:
            advance()
            return .literal(.string(token.text))
        case .keyword(.true): advance(); return .literal(.bool(true))
        case .keyword(.false): advance(); return .literal(.bool(false))
        case .keyword(.null): advance(); return .literal(.null)
        case .parameter:
            advance()
            return .parameter(token.text)
        case .quotedIdentifier:
            advance()
            return .path(Path(token.text))
        case .identifier:
            advance()
            if current.kind == .leftParen { return try parseCall(token) }
            return .path(Path(token.text))
        case .leftParen:
            advance()
            let e = try parseExpression()
            try expect(.rightParen, "')'")
            return e
        case .leftBracket:
            advance()
            try enter()
            defer { depth -= 1 }
            var items: [Expression] = []
            if current.kind != .rightBracket {
                repeat { items.append(try parseExpression()) } while skip(.comma)
            }
            try expect(.rightBracket, "',' or ']'")
            return .array(items)
        case .leftBrace:
            advance()
            try enter()
            defer { depth -= 1 }
            var entries: [ObjectEntry] = []
            if current.kind != .rightBrace {
                repeat {
                    let key: String
                    switch current.kind {
                    case .string, .identifier, .quotedIdentifier, .keyword: key = try fieldName(advance())
                    default: throw error(expected: "an object key")
                    }
                    try expect(.colon, "':' (write a space before a value that starts with ':')")
                    entries.append(ObjectEntry(key, try parseExpression()))
                } while skip(.comma)
            }
            try expect(.rightBrace, "',' or '}'")
            return .object(entries)
        default:
            throw error(expected: "an expression")
        }
    }

    mutating func parseCall(_ name: Token) throws(DQLSyntaxError) -> Expression {
        advance()  // '('
        try enter()
        defer { depth -= 1 }
        let lower = name.text.lowercased()
        if let aggregate = AggregateFunction(rawValue: name.text.uppercased()) {
            if aggregate == .count, skip(.star) {
                try expect(.rightParen, "')'")
                return .aggregate(.count, nil, distinct: false)
            }
            let distinct = skip(.distinct)
            let argument = try parseExpression()
            if !distinct, current.kind == .comma, aggregate == .min || aggregate == .max {
                // min(a, b, ...) / max(a, b, ...) with several arguments are the scalar functions.
                var args = [argument]
                while skip(.comma) { args.append(try parseExpression()) }
                try expect(.rightParen, "',' or ')'")
                return .call(lower, args)
            }
            try expect(.rightParen, "')'")
            return .aggregate(aggregate, argument, distinct: distinct)
        }
        var args: [Expression] = []
        if current.kind != .rightParen {
            repeat { args.append(try parseExpression()) } while skip(.comma)
        }
        try expect(.rightParen, "',' or ')'")
        return .call(lower, args)
    }
}
