// libFuzzer entry point for the DQL parser (and, through it, the printer): any input either parses
// or fails with a positioned DQLSyntaxError; a statement that parses must print to text that parses
// back to the same AST. Build and run with scripts/fuzz.sh DQLParse (it links the Values and DQL
// sources with `-sanitize=fuzzer,address`); crashers belong in Tests/DQLTests as regression cases.
#if canImport(DQL)
import DQL
#endif

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDQLParse(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let statement = try DQL.parse(text)
        let printed = Printer.print(statement)
        guard let again = try? DQL.parse(printed), again == statement else {
            fatalError("print/parse mismatch:\n\(text)\n---\n\(printed)")
        }
    } catch {
        precondition(error.location.line >= 1 && error.location.column >= 1, "unpositioned error: \(error)")
    }
    return 0
}
