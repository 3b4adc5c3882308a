// DQL: lexer, parser, AST, printer, evaluator over documents, and the planner that pushes predicates down to SQL. Pure; no I/O.

/// Marker for the module; the real API lives in the other files of this folder.
public enum DQLModule {
    public static let name = "DQL"
}
