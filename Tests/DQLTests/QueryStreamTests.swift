import Testing
import Values
@testable import DQL

/// `SelectStream` (documents fed one at a time, for results too large to hold) answers exactly
/// what `SelectQuery.run` answers over all documents at once, and refuses the queries that need
/// every document first.
@Suite struct QueryStreamTests {
    static let context = EvaluationContext(arguments: ["m": "ford"], nowMilliseconds: 1_700_000_000_000)

    static func query(_ text: String) throws -> SelectQuery {
        guard case .select(let s) = try DQL.parse(text) else { throw DQLEvaluationError.invalidStatement("not a select") }
        return try SelectQuery(s, context: context)
    }

    @Test(arguments: [
        "SELECT * FROM cars",
        "SELECT * FROM cars WHERE make = :m",
        "SELECT make, price AS cost, specs.doors FROM cars WHERE year > 2012",
        "SELECT * FROM cars LIMIT 2",
        "SELECT * FROM cars OFFSET 3",
        "SELECT _id FROM cars WHERE make != 'bmw' LIMIT 2 OFFSET 1",
        "SELECT * FROM cars LIMIT 0",
        "SELECT * FROM cars OFFSET 10",
        "SELECT _id, (note IS NULL) AS n FROM cars",
    ])
    func streamedRowsEqualTheWholeRun(_ text: String) throws {
        let q = try Self.query(text)
        var stream = try #require(SelectStream(q))
        var rows: [Value] = []
        for doc in Fixture.cars {
            if let row = try stream.row(for: doc) { rows.append(row) }
        }
        #expect(rows == (try q.run(Fixture.cars)))
        if let limit = q.limit, rows.count == limit { #expect(stream.isDone) }
    }

    @Test(arguments: [
        "SELECT * FROM cars ORDER BY year",
        "SELECT DISTINCT make FROM cars",
        "SELECT make, COUNT(*) AS n FROM cars GROUP BY make",
        "SELECT COUNT(*) FROM cars",
        "SELECT MAX(price) AS top FROM cars",
    ])
    func queriesThatNeedEveryDocumentDoNotStream(_ text: String) throws {
        let q = try Self.query(text)
        #expect(!q.streams)
        #expect(SelectStream(q) == nil)
    }

    /// A row's evaluation error surfaces from the row that causes it, as in `run`.
    @Test func evaluationErrorsSurfaceFromTheirRow() throws {
        let q = try Self.query("SELECT price + 1 AS p FROM cars")
        var stream = try #require(SelectStream(q))
        var failedAt: String?
        for doc in Fixture.cars {
            do { _ = try stream.row(for: doc) } catch { failedAt = doc["_id"]?.stringValue; break }
        }
        #expect(failedAt == "e")  // Int64.max + 1 overflows
        #expect(throws: DQLEvaluationError.self) { try q.run(Fixture.cars) }
    }
}
