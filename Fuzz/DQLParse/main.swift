// libFuzzer entry point for the DQL parser (and, through it, the printer): any input either parses
// or fails with a positioned DQLSyntaxError; a statement that parses must print to text that parses
// back to the same AST. Run with scripts/fuzz.sh DQLParse; crashers belong in Tests/DQLTests as
// regression cases. DQL's sources `import Values`, so Values is built as its own module first:
//   swiftc -sanitize=fuzzer,address -parse-as-library -O -module-name Values -emit-module \
//          -emit-library -static Sources/Values/*.swift -o libValues.a
//   swiftc -sanitize=fuzzer,address -parse-as-library -O -module-name DQLFuzz -I . -L . -lValues \
//          Sources/DQL/*.swift Fuzz/DQLParse/main.swift -o dqlparse-fuzz
// (checked on this machine: one round-trip failure at the nesting limit found and fixed, kept in
// FuzzRegressionTests; then 0.8M runs in 90 s, no crash).
#if canImport(DQL)
import DQL
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDQLParse(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    checkRoundTrip(text, parse: { text throws(DQLSyntaxError) in try DQL.parse(text) }, print: Printer.print)
    // `SYNC CONTEXT (PEERS ...) SELECT ...`, which only remote_execute parses.
    checkRoundTrip(text, parse: { text throws(DQLSyntaxError) in try DQL.parseSyncContext(text) }, print: Printer.print)
    return 0
}

/// `text` parses or fails with a positioned error; what parses prints to text that parses back to it.
func checkRoundTrip<S: Equatable>(_ text: String, parse: (String) throws(DQLSyntaxError) -> S, print: (S) -> String) {
    do {
        let statement = try parse(text)
        let printed = print(statement)
        guard let again = try? parse(printed), again == statement else {
            fatalError("print/parse mismatch:\n\(text)\n---\n\(printed)")
        }
    } catch {
        precondition(error.location.line >= 1 && error.location.column >= 1, "unpositioned error: \(error)")
    }
}
