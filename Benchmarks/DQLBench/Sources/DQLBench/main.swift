// DQL and JSON micro-benchmarks. Each measurement runs several rounds and prints the median.
import DQL
import Values

struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func seconds(_ d: Duration) -> Double {
    Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
}

func median(_ rounds: Int = 5, _ body: () throws -> Double) rethrows -> Double {
    var xs: [Double] = []
    for _ in 0..<rounds { xs.append(try body()) }
    xs.sort()
    return xs[xs.count / 2]
}

let clock = ContinuousClock()

// 1. Parse time of a ~200-character SELECT.
let statement = "SELECT make, model, AVG(price) AS avg_price FROM cars WHERE color IN ('blue', 'red') AND year >= :year AND specs.hp > 150 AND name LIKE 'A%' GROUP BY make, model ORDER BY avg_price DESC LIMIT 10"
let parseIterations = 20_000
let parseNs = try median {
    let t = clock.measure {
        for _ in 0..<parseIterations { _ = try? DQL.parse(statement) }
    }
    return seconds(t) / Double(parseIterations) * 1e9
}
print("parse: \(statement.utf8.count)-char SELECT: \(Int(parseNs)) ns/statement (\(Int(parseNs / 1000 * 10) / 10) µs)")

// 2. In-memory filter over ~1 KB documents, 3-predicate WHERE.
var rng = SplitMix64(state: 1)
let colors: [Value] = ["blue", "red", "green", "black", "white"]
func document(_ i: Int, _ rng: inout SplitMix64) -> Value {
    var o: [String: Value] = ["_id": .string("doc-\(i)"), "color": colors[Int(rng.next() % 5)],
                              "year": .int(Int64(1990 + rng.next() % 35)), "price": .double(Double(rng.next() % 100_000) + 0.5),
                              "specs": ["hp": .int(Int64(rng.next() % 400)), "doors": .int(Int64(2 + rng.next() % 3)), "fuel": "petrol"]]
    for k in 0..<14 { o["field_\(k)"] = .string(String(repeating: "x", count: 40 + Int(rng.next() % 20))) }
    o["tags"] = .array((0..<5).map { .string("tag\($0)") })
    return .object(o)
}
let docs = (0..<50_000).map { document($0, &rng) }
let avgSize = docs.reduce(0) { $0 + JSON.serialize($1).count } / docs.count
guard case .select(let filterStatement) = try DQL.parse("SELECT * FROM cars WHERE color = 'blue' AND year >= 2005 AND specs.hp > 100") else { fatalError("benchmark statement") }
let query = try SelectQuery(filterStatement, context: EvaluationContext())
var matched = 0
let filterRate = try median {
    matched = 0
    let t = try clock.measure {
        for d in docs where try query.matches(d) { matched += 1 }
    }
    return Double(docs.count) / seconds(t)
}
print("filter: \(docs.count) docs of ~\(avgSize) bytes, 3 predicates: \(Int(filterRate)) docs/s (\(matched) matched)")

// 3. JSON parse and serialize throughput.
let blob = JSON.serialize(.array(Array(docs.prefix(10_000))))
let mb = Double(blob.count) / 1_000_000
let parseRate = try median {
    let t = try clock.measure { _ = try JSON.parse(blob) }
    return mb / seconds(t)
}
let value = try JSON.parse(blob)
let serializeRate = median {
    let t = clock.measure { _ = JSON.serialize(value) }
    return mb / seconds(t)
}
print("json: \(Int(mb * 10) / 10) MB document array: parse \(Int(parseRate)) MB/s, serialize \(Int(serializeRate)) MB/s")
