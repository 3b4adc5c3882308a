// Structural helpers over expressions: children, search, and substitution.

extension Expression {
    /// Direct sub-expressions, left to right.
    public var children: [Expression] {
        switch self {
        case .literal, .parameter, .path: []
        case .access(let b, _): [b]
        case .array(let items): items
        case .object(let entries): entries.map(\.value)
        case .unary(_, let x): [x]
        case .binary(_, let l, let r): [l, r]
        case .between(let x, let lo, let hi, _): [x, lo, hi]
        case .inList(let x, let items, _): [x] + items
        case .inArray(let x, let a, _): [x, a]
        case .like(let x, let p, let e, _, _): [x, p] + (e.map { [$0] } ?? [])
        case .isNull(let x, _), .isMissing(let x, _): [x]
        case .call(_, let args): args
        case .aggregate(_, let a, _): a.map { [$0] } ?? []
        }
    }

    /// True if this expression or any sub-expression satisfies `predicate`.
    public func contains(where predicate: (Expression) -> Bool) -> Bool {
        if predicate(self) { return true }
        return children.contains { $0.contains(where: predicate) }
    }

    public var containsAggregate: Bool {
        contains { if case .aggregate = $0 { true } else { false } }
    }

    /// Every aggregate sub-expression, outermost first, without duplicates.
    func collectAggregates(into out: inout [Expression]) {
        if case .aggregate = self {
            if !out.contains(self) { out.append(self) }
            return
        }
        for c in children { c.collectAggregates(into: &out) }
    }
}

extension Expression {
    /// Rewrites the tree top-down: where `transform` returns a replacement it is used as is,
    /// elsewhere the node is rebuilt from its rewritten children.
    public func substituting(_ transform: (Expression) -> Expression?) -> Expression {
        if let replacement = transform(self) { return replacement }
        func s(_ e: Expression) -> Expression { e.substituting(transform) }
        switch self {
        case .literal, .parameter, .path: return self
        case .access(let b, let c): return .access(s(b), c)
        case .array(let items): return .array(items.map(s))
        case .object(let entries): return .object(entries.map { ObjectEntry($0.key, s($0.value)) })
        case .unary(let op, let x): return .unary(op, s(x))
        case .binary(let op, let l, let r): return .binary(op, s(l), s(r))
        case .between(let x, let lo, let hi, let n): return .between(s(x), low: s(lo), high: s(hi), negated: n)
        case .inList(let x, let items, let n): return .inList(s(x), items.map(s), negated: n)
        case .inArray(let x, let a, let n): return .inArray(s(x), s(a), negated: n)
        case .like(let x, let p, let e, let ci, let n): return .like(s(x), pattern: s(p), escape: e.map(s), caseInsensitive: ci, negated: n)
        case .isNull(let x, let n): return .isNull(s(x), negated: n)
        case .isMissing(let x, let n): return .isMissing(s(x), negated: n)
        case .call(let name, let args): return .call(name, args.map(s))
        case .aggregate(let f, let a, let d): return .aggregate(f, a.map(s), distinct: d)
        }
    }
}
