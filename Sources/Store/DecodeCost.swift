// What decoding stored documents costs an evaluation budget (`EvaluationBudget`, steps).
//
// Decoding is work the budget bounds like any other in-memory stage, and it is charged before it
// is done: an event loop's inline slice (`InMemoryEvaluation.onLoopSteps`) that cannot afford a
// result then yields before it decodes any of it, instead of decoding it all on the loop and
// again off it (the hostile mix: 1,000-row results decoded on the loop were ~9 % of its time,
// docs/performance-history.md, "Hostile mix").

import DQL
import Postgres

enum DecodeCost {
    /// Steps per document besides its bytes: parsing allocates the document's dictionary and
    /// strings, ~0.9 µs for a two-field document in the hostile mix, and a step is ~10-40 ns.
    static let stepsPerDocument = 32

    /// Steps to decode one document of `bytes` stored-JSON bytes.
    static func steps(bytes: Int) -> Int { bytes / 4 + stepsPerDocument }

    /// Steps to decode column `column` of every row of `rows` (NULLs are skipped, and free).
    static func steps(_ rows: PostgresResult, column: Int) -> Int {
        var steps = 0
        for row in rows where !row.isNull(column) { steps += Self.steps(bytes: row.withRawValue(column) { $0?.count ?? 0 }) }
        return steps
    }
}
