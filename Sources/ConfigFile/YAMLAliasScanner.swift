/// Finds YAML aliases (`*name`) before the YAML parser sees the text.
///
/// Yams shares an aliased node instead of copying it, so a "billion laughs" file costs no memory
/// while it is composed, but its duplicate-key check hashes mapping keys recursively: one key
/// built from nested aliases takes exponential time, and so would anything that walks the tree.
/// A configuration has no use for aliases, so they are refused, and Yams never sees one.
///
/// The scan follows just enough of YAML's syntax to know where a node can start (line start,
/// after `- `, `? `, `: `, `[`, `{`, a flow `,`, an anchor or a tag) and what is not syntax
/// (quoted scalars, comments, the lines of a block scalar). Where it is unsure it errs toward
/// reporting an alias: a false report names the line and asks for quotes, a miss would let an
/// alias through.
enum YAMLAliasScanner {
    /// The 1-based line and column (in Unicode scalars, as libyaml counts) of the first alias, or nil.
    /// `text` is UTF-8.
    static func firstAlias(in text: [UInt8]) -> (line: Int, column: Int)? {
        var state = State()
        var lineNumber = 0
        var start = 0
        while start <= text.count {
            var end = start
            while end < text.count && text[end] != 0x0A { end += 1 }
            lineNumber += 1
            var line = text[start..<end]
            if line.last == 0x0D { line = line.dropLast() }
            if let offset = state.scan(Array(line)) {
                return (lineNumber, String(decoding: line.prefix(offset), as: UTF8.self).unicodeScalars.count + 1)
            }
            start = end + 1
        }
        return nil
    }

    private enum Quote { case none, single, double }

    /// A block scalar (`|` or `>`) whose lines are content, not syntax.
    private struct BlockScalar {
        /// Indentation of the collection that holds the scalar (-1 at the document's top).
        var parentIndent: Int
        /// Indentation of its content, once known.
        var contentIndent: Int?
    }

    private struct State {
        var quote = Quote.none
        var flowDepth = 0
        var block: BlockScalar?

        /// The 0-based column of an alias on `line`, or nil.
        mutating func scan(_ line: [UInt8]) -> Int? {
            let indent = line.prefix { $0 == space }.count
            if let b = block {
                let blank = line.allSatisfy { $0 == space || $0 == tab }
                if blank { return nil }
                if let content = b.contentIndent {
                    if indent >= content { return nil }
                } else if indent > b.parentIndent {
                    block?.contentIndent = indent
                    return nil
                }
                block = nil
            }
            var expecting = quote == .none
            // Where the collection a block scalar on this line would belong to starts.
            var collectionColumn = -1
            var scalarStart = indent
            var i = 0
            if quote == .none && flowDepth == 0 && line.count >= 3 && (line[0...2].elementsEqual("---".utf8) || line[0...2].elementsEqual("...".utf8))
                && (line.count == 3 || isSpace(line[3])) {
                i = 3
            }
            while i < line.count {
                let c = line[i]
                switch quote {
                case .single:
                    if c == apostrophe {
                        if i + 1 < line.count && line[i + 1] == apostrophe { i += 2; continue }
                        quote = .none
                    }
                    i += 1
                    continue
                case .double:
                    if c == backslash { i += 2; continue }
                    if c == doubleQuote { quote = .none }
                    i += 1
                    continue
                case .none:
                    break
                }
                if isSpace(c) { i += 1; continue }
                if c == hash && (i == 0 || isSpace(line[i - 1])) { return nil }
                let next: UInt8? = i + 1 < line.count ? line[i + 1] : nil
                let indicatorFollows = next.map(isSpace) ?? true
                if expecting {
                    if c == asterisk { return i }
                    if c == ampersand || c == exclamation {  // an anchor or a tag: the node follows
                        while i < line.count && !isSpace(line[i]) && !(flowDepth > 0 && isFlowIndicator(line[i])) { i += 1 }
                    } else if (c == dash || c == question) && indicatorFollows {
                        collectionColumn = i
                        i += 1
                    } else if c == colon && indicatorFollows {
                        i += 1
                    } else if c == openBracket || c == openBrace {
                        flowDepth += 1
                        i += 1
                    } else if c == closeBracket || c == closeBrace {
                        flowDepth = max(0, flowDepth - 1)
                        expecting = false
                        i += 1
                    } else if c == comma && flowDepth > 0 {
                        i += 1
                    } else if c == apostrophe || c == doubleQuote {
                        quote = c == apostrophe ? .single : .double
                        scalarStart = i
                        expecting = false
                        i += 1
                    } else if (c == pipe || c == greater) && flowDepth == 0 {
                        block = BlockScalar(parentIndent: collectionColumn)
                        // An explicit indentation indicator (`|2`) fixes the content's indentation.
                        let header = line[(i + 1)...].prefix { !isSpace($0) && $0 != hash }
                        if let digit = header.first(where: { (0x31...0x39).contains($0) }) {
                            block?.contentIndent = max(collectionColumn, 0) + Int(digit - 0x30)
                        }
                        return nil
                    } else {
                        scalarStart = i
                        expecting = false
                        i += 1
                    }
                    continue
                }
                if c == colon && (indicatorFollows || (flowDepth > 0 && next.map(isFlowIndicator) == true)) {
                    collectionColumn = scalarStart
                    expecting = true
                } else if flowDepth > 0 && c == comma {
                    expecting = true
                } else if flowDepth > 0 && (c == closeBracket || c == closeBrace) {
                    flowDepth -= 1
                } else if flowDepth > 0 && (c == openBracket || c == openBrace) {
                    flowDepth += 1
                    expecting = true
                }
                i += 1
            }
            return nil
        }
    }
}

private func isSpace(_ c: UInt8) -> Bool { c == space || c == tab }
private func isFlowIndicator(_ c: UInt8) -> Bool { c == comma || c == openBracket || c == closeBracket || c == openBrace || c == closeBrace }

private let space: UInt8 = 0x20, tab: UInt8 = 0x09, hash: UInt8 = 0x23, asterisk: UInt8 = 0x2A, ampersand: UInt8 = 0x26
private let exclamation: UInt8 = 0x21, dash: UInt8 = 0x2D, question: UInt8 = 0x3F, colon: UInt8 = 0x3A, comma: UInt8 = 0x2C
private let openBracket: UInt8 = 0x5B, closeBracket: UInt8 = 0x5D, openBrace: UInt8 = 0x7B, closeBrace: UInt8 = 0x7D
private let apostrophe: UInt8 = 0x27, doubleQuote: UInt8 = 0x22, backslash: UInt8 = 0x5C, pipe: UInt8 = 0x7C, greater: UInt8 = 0x3E
