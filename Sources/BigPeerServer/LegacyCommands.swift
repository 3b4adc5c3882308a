import DQL
import HTTP
import Store
import Values

/// Request fields of the legacy endpoints and the translation of `/write` commands into DQL.
///
///     {"method": "upsert", "collection": c, "id"?: id, "value": {...}, "valueTypeOverrides"?: {path: type}}
///         -> INSERT INTO [COLLECTION] c [(path TYPE, ...)] DOCUMENTS (:doc) ON ID CONFLICT DO UPDATE
///     {"method": "update", "collection": c, "query"?: q, "args"?: {...},
///      "updates": [{"method": "set" | "increment" | "replaceWithCounter", "path": p, "value": v}, ...]}
///         -> UPDATE [COLLECTION] c [(p COUNTER, ...)] [APPLY p INCREMENT BY :v | p RESTART WITH :v] [SET p = :v] WHERE q
///     {"method": "remove", "collection": c, "query": q | "id": id}
///         -> DELETE FROM c WHERE q   (or WHERE _id = :id)
enum LegacyCommands {
    static let maxCommands = 1000
    static let maxUpdatesPerCommand = 1000

    struct Translated {
        var method: String
        var collection: String
        var statement: Statement
        var arguments: [String: Value]
    }

    static func collection(_ body: [String: Value]) throws -> String {
        guard case .string(let c)? = body["collection"], !c.isEmpty, c.utf8.count <= 255 else {
            throw APIError(.badRequest, "\"collection\" (a non-empty string of at most 255 bytes) is required")
        }
        return c
    }

    /// The translated `query` with its `args` (an absent query matches every document).
    static func condition(_ body: [String: Value]) throws -> (String, [String: Value]) {
        var query: String?
        switch body["query"] {
        case nil, .null?: query = nil
        case .string(let q)?: query = q
        default: throw APIError(.badRequest, "\"query\" must be a string in the legacy query syntax")
        }
        var args: [String: Value] = [:]
        switch body["args"] {
        case nil, .null?: break
        case .object(let a)?: args = a
        default: throw APIError(.badRequest, "\"args\" must be an object")
        }
        do {
            let t = try LegacyQuery.translate(query, arguments: args)
            return (t.condition, t.arguments)
        } catch {
            throw APIError(.badRequest, error.description)
        }
    }

    static func path(_ text: String) throws -> String {
        do { return try LegacyQuery.translatePath(text) } catch { throw APIError(.badRequest, "path \"\(text)\": \(error.description)") }
    }

    /// `limit` / `offset`: absent, or a non-negative integer.
    static func count(_ body: [String: Value], _ key: String) throws -> Int64? {
        switch body[key] {
        case nil, .null?: return nil
        case .int(let n)? where n >= 0: return n
        case .double(let d)? where d >= 0 && d <= 9e15 && d == d.rounded(): return Int64(d)
        default: throw APIError(.badRequest, "\"\(key)\" must be a non-negative integer")
        }
    }

    /// `{id, fields}` for one stored document (fields include `_id`, as Ditto returns them).
    static func document(_ item: Value) -> Value {
        guard case .object(let fields) = item else { return ["id": .null, "fields": item] }
        return ["id": fields["_id"] ?? .null, "fields": item]
    }

    static func translate(_ command: Value) throws -> Translated {
        guard case .object(let c) = command else { throw APIError(.badRequest, "each command must be an object") }
        let collection = try collection(c)
        let quoted = LegacyQuery.quoteIdentifier(collection)
        switch c["method"] {
        case .string("upsert")?:
            guard case .object(var value)? = c["value"] else { throw APIError(.badRequest, "upsert needs \"value\" (an object)") }
            if let id = c["id"], id != .null {
                if let inner = value["_id"], inner != id { throw APIError(.badRequest, "upsert \"id\" and \"value._id\" differ") }
                value["_id"] = id
            }
            let target = try declaredTarget(quoted, overrides(c["valueTypeOverrides"]))
            let dql = "INSERT INTO \(target) DOCUMENTS (:doc) ON ID CONFLICT DO UPDATE"
            return Translated(method: "upsert", collection: collection, statement: try parse(dql), arguments: ["doc": .object(value)])
        case .string("update")?:
            guard case .array(let updates)? = c["updates"], !updates.isEmpty, updates.count <= maxUpdatesPerCommand else {
                throw APIError(.badRequest, "update needs \"updates\": 1 to \(maxUpdatesPerCommand) {method, path, value} objects")
            }
            var (condition, args) = try condition(c)
            var apply: [String] = [], set: [String] = [], counters: [(String, String)] = []
            for (i, u) in updates.enumerated() {
                guard case .object(let o) = u, case .string(let method)? = o["method"], case .string(let p)? = o["path"] else {
                    throw APIError(.badRequest, "update \(i + 1) needs \"method\" and \"path\" strings")
                }
                let path = try path(p)
                let param = "u\(i)"
                guard let v = o["value"] else { throw APIError(.badRequest, "update \(i + 1) needs \"value\"") }
                args[param] = v
                switch method {
                case "set": set.append("\(path) = :\(param)")
                case "increment":
                    apply.append("\(path) INCREMENT BY :\(param)")
                    counters.append((path, "COUNTER"))
                case "replaceWithCounter":
                    apply.append("\(path) RESTART WITH :\(param)")
                    counters.append((path, "COUNTER"))
                default: throw APIError(.badRequest, "update \(i + 1): method must be set, increment or replaceWithCounter, not \(method)")
                }
            }
            var dql = "UPDATE \(try declaredTarget(quoted, counters))"
            if !apply.isEmpty { dql += " APPLY " + apply.joined(separator: ", ") }
            if !set.isEmpty { dql += " SET " + set.joined(separator: ", ") }
            dql += " WHERE \(condition)"
            return Translated(method: "update", collection: collection, statement: try parse(dql), arguments: args)
        case .string("remove")?:
            if let id = c["id"], id != .null {
                if c["query"] != nil && c["query"] != .null { throw APIError(.badRequest, "remove takes \"query\" or \"id\", not both") }
                switch id {
                case .string, .object: break
                default: throw APIError(.badRequest, "remove: \"id\" must be a string or an object (a document's _id), not \(id.typeName)")
                }
                return Translated(method: "remove", collection: collection,
                                  statement: try parse("DELETE FROM \(quoted) WHERE _id = :id"), arguments: ["id": id])
            }
            guard case .string? = c["query"] else { throw APIError(.badRequest, "remove needs \"query\" or \"id\"") }
            let (condition, args) = try condition(c)
            return Translated(method: "remove", collection: collection, statement: try parse("DELETE FROM \(quoted) WHERE \(condition)"), arguments: args)
        default:
            throw APIError(.badRequest, "\"method\" must be upsert, update or remove")
        }
    }

    /// `valueTypeOverrides`: path -> counter | register | map | attachment.
    static func overrides(_ v: Value?) throws -> [(String, String)] {
        switch v {
        case nil, .null?: return []
        case .object(let o)?:
            return try o.keys.sorted().map { key in
                guard case .string(let type)? = o[key] else { throw APIError(.badRequest, "valueTypeOverrides.\(key) must be a string") }
                switch type.lowercased() {
                case "counter": return (try path(key), "COUNTER")
                case "register": return (try path(key), "REGISTER")
                case "map": return (try path(key), "MAP")
                case "attachment": return (try path(key), "ATTACHMENT")
                default: throw APIError(.badRequest, "valueTypeOverrides.\(key): type must be counter, register, map or attachment")
                }
            }
        default: throw APIError(.badRequest, "\"valueTypeOverrides\" must be an object")
        }
    }

    static func declaredTarget(_ quoted: String, _ declarations: [(String, String)]) throws -> String {
        if declarations.isEmpty { return quoted }
        var seen = Set<String>()
        var parts: [String] = []
        for (path, type) in declarations where seen.insert(path).inserted { parts.append("\(path) \(type)") }
        return "COLLECTION \(quoted) (\(parts.joined(separator: ", ")))"
    }

    static func parse(_ dql: String) throws -> Statement {
        do { return try DQL.parse(dql) } catch { throw APIError(.badRequest, "the command translates to invalid DQL: \(StoreError.syntax(error))") }
    }

    /// The per-command result of `/write`.
    static func result(_ t: Translated, _ r: ExecuteResult) -> Value {
        var out: [String: Value] = ["method": .string(t.method), "collection": .string(t.collection)]
        switch t.method {
        case "upsert": out["id"] = r.mutatedDocumentIDs.first ?? .null
        case "update": out["updated"] = .int(Int64(r.mutatedDocumentIDs.count)); out["ids"] = .array(r.mutatedDocumentIDs)
        default: out["removed"] = .int(Int64(r.mutatedDocumentIDs.count)); out["ids"] = .array(r.mutatedDocumentIDs)
        }
        return .object(out)
    }
}
