import ArgumentParser
import Auth
import BigPeerServer
import DQL
import Foundation
import Logging
import Postgres
import Sockets

/// `bigpeer keys create|list|revoke`: API keys for the REST API (docs/API.md "Authentication").
struct KeysCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Create, list and revoke API keys.",
        subcommands: [CreateKey.self, ListKeys.self, RevokeKey.self])
}

/// Opens the database (applying pending migrations, so the key table exists) for one command.
func withKeyStore<R>(_ options: DatabaseOptions, _ body: (APIKeyStore) async throws -> R) async throws -> R {
    // Logs go to stderr and only above info: stdout is for the key (scripts read its last line).
    LoggingSystem.bootstrap { label in
        var h = StreamLogHandler.standardError(label: label)
        h.logLevel = .warning
        return h
    }
    let logger = Logger(label: "bigpeer.keys")
    let group = try EventLoopGroup(threads: 1)
    defer { group.shutdown() }
    let source = DatabaseSource.resolve(databaseURL: options.databaseURL, dataDirectory: options.dataDirectory)
    let db: Database
    do {
        db = try await Database.open(source, migrationsDirectory: options.migrationsDirectory, loop: group.next(), logger: logger)
    } catch let e as PostgresError {
        throw ValidationError(e.debugDescription)
    }
    var poolConfig = PostgresPool.Configuration()
    poolConfig.maxConnections = 1
    let pool = PostgresPool(db.configuration, configuration: poolConfig, group: group)
    do {
        let r = try await body(APIKeyStore(pool: pool))
        await pool.shutdown()
        try? db.localCluster?.stop()
        return r
    } catch {
        await pool.shutdown()
        try? db.localCluster?.stop()
        throw error
    }
}

struct CreateKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "create",
        abstract: "Create a key and print it once (the last line of the output is the key alone).")

    @Option(help: "What the key is for (shown by `keys list`).") var description: String
    @Option(name: .customLong("expires-in"), help: "Lifetime: a number with s, m, h, d or w (e.g. 30d, 12h); at most 3650d.")
    var expiresIn: String
    @Option(help: ArgumentHelp(
        "Collections the key may read, comma-separated; or one collection with a rule, \"orders: site = 'A'\" (repeatable).",
        discussion: "A rule is a DQL condition (or Ditto's legacy query form): the key sees only the collection's documents for which it is true; several rules for one collection are ORed (docs/AUTH.md, \"Rules\")."))
    var read: [String] = []
    @Flag(name: .customLong("read-all"), help: "The key may read every collection.") var readAll = false
    @Option(help: ArgumentHelp(
        "Collections the key may write, comma-separated; or one collection with a rule, \"orders: site = 'A'\" (repeatable).",
        discussion: "A write rule: the key may change only documents for which it is true, before and after the change (docs/AUTH.md, \"Write rules\")."))
    var write: [String] = []
    @Flag(name: .customLong("write-all"), help: "The key may write every collection (and run ALTER SYSTEM, CREATE/DROP INDEX).")
    var writeAll = false
    @Flag(name: .customLong("read-attachments"),
          help: "The key may download any attachment by id, not only those referenced by documents it may read (docs/AUTH.md, \"Attachments\").")
    var readAttachments = false
    @Option(name: .customLong("time-limit"), help: ArgumentHelp(
        "The key's share of the server's time, RATE:BURST (seconds of request time a second : seconds), e.g. 0.25:2.",
        discussion: "Each REST request's time is charged to the key after it answered; over its share, the key's requests wait for it (up to 5 s) or get 429. Without it, the server's --time-limit-credential applies, if any (docs/AUTH.md, \"Server time\")."))
    var timeLimit: String?
    @OptionGroup var database: DatabaseOptions

    func validate() throws {
        let readLists = read.filter { !$0.contains(":") }
        if !readLists.isEmpty && readAll { throw ValidationError("--read LIST and --read-all exclude each other (rules may go with --read-all)") }
        if write.contains(where: { !$0.contains(":") }) && writeAll {
            throw ValidationError("--write LIST and --write-all exclude each other (rules may go with --write-all)")
        }
        if read.isEmpty && !readAll && write.isEmpty && !writeAll && !readAttachments {
            throw ValidationError("give the key a scope: --read LIST, --read \"COLLECTION: RULE\", --read-all, --write LIST, --write \"COLLECTION: RULE\", --write-all and/or --read-attachments")
        }
        _ = try Self.lifetimeMicroseconds(expiresIn)
        _ = try Self.timeLimit(timeLimit)
        _ = try Self.scopeAndRules(read, all: readAll, option: "--read")
        _ = try Self.scopeAndRules(write, all: writeAll, option: "--write")
    }

    func run() async throws {
        let lifetime = try Self.lifetimeMicroseconds(expiresIn)
        let (readScope, rules) = try Self.scopeAndRules(read, all: readAll, option: "--read")
        let (writeScope, writeRules) = try Self.scopeAndRules(write, all: writeAll, option: "--write")
        let expires = PostgresTimestamp(microsecondsSince1970: APIKeyStore.now().microsecondsSince1970 + lifetime)
        let (key, token) = try await withKeyStore(database) {
            try await $0.create(description: description, expiresAt: expires, read: readScope, write: writeScope,
                                readRules: rules, writeRules: writeRules, readAttachments: readAttachments,
                                timeLimit: try Self.timeLimit(timeLimit))
        }
        print("created API key \(key.id)")
        print("  description: \(key.description)")
        print("  expires:     \(formatTime(key.expiresAt))")
        print("  read:        \(key.read)")
        if !key.readRules.isEmpty { print("  read rules:  \(key.readRules)") }
        print("  write:       \(key.write)")
        if !key.writeRules.isEmpty { print("  write rules: \(key.writeRules)") }
        if key.readAttachments { print("  attachments: any (--read-attachments)") }
        if let limit = key.timeLimit { print("  time limit:  \(Self.describe(limit))") }
        print("This is the only time the key is shown; store it now. Use it as: Authorization: Bearer <key>")
        print(token.text)
    }

    /// `--time-limit RATE:BURST`, in the bounds the table allows.
    static func timeLimit(_ text: String?) throws -> TokenBucketRate? {
        guard let text else { return nil }
        guard let rate = TokenBucketRate(parsing: text) else {
            throw ValidationError("--time-limit is RATE:BURST, seconds a second and seconds (e.g. 0.25:2): RATE above 0, BURST at least 1")
        }
        guard rate.perSecond <= APIKeyStore.maxTimeLimit && rate.burst <= APIKeyStore.maxTimeLimit else {
            throw ValidationError("--time-limit: RATE and BURST are at most \(Int(APIKeyStore.maxTimeLimit))")
        }
        return rate
    }

    /// `0.25 s/s, burst 2 s`, as `keys create` and `keys list` show a time limit.
    static func describe(_ limit: TokenBucketRate) -> String { "\(limit.perSecond) s/s, burst \(limit.burst) s" }

    /// `30d`, `12h`, `90m`, `3600s`, `2w` in microseconds (positive, at most ten years).
    static func lifetimeMicroseconds(_ text: String) throws -> Int64 {
        guard let unit = text.last, let n = Int64(text.dropLast()), n > 0 else {
            throw ValidationError("--expires-in must be a positive number followed by s, m, h, d or w (e.g. 30d)")
        }
        let seconds: Int64
        switch unit {
        case "s": seconds = 1
        case "m": seconds = 60
        case "h": seconds = 3600
        case "d": seconds = 86_400
        case "w": seconds = 7 * 86_400
        default: throw ValidationError("--expires-in unit must be s, m, h, d or w, not \(unit)")
        }
        let (total, overflow) = n.multipliedReportingOverflow(by: seconds)
        guard !overflow, total <= 3650 * 86_400 else { throw ValidationError("--expires-in is at most 3650d") }
        return total * 1_000_000
    }

    /// Each `--read` or `--write`: a comma-separated list of collections, or `collection: rule` (one rule).
    static func scopeAndRules(_ values: [String], all: Bool, option: String) throws -> (CollectionScope, [DocumentRule]) {
        var names = Set<String>(), rules: [DocumentRule] = []
        for value in values {
            if value.contains(":") {
                do { rules.append(try DocumentRule.parse(entry: value)) } catch { throw ValidationError("\(option) \"\(value)\": \(error)") }
            } else if case .only(let list) = try scope(value, all: false) {
                names.formUnion(list)
            }
        }
        return (all ? .all : .only(names), rules)
    }

    static func scope(_ list: String?, all: Bool) throws -> CollectionScope {
        if all { return .all }
        guard let list else { return .none }
        let names = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
        guard !names.isEmpty, names.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 255 }) else {
            throw ValidationError("collection lists are comma-separated non-empty names (e.g. cars,people)")
        }
        return .only(Set(names))
    }
}

struct ListKeys: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List keys (never shows the keys themselves).")
    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        let keys = try await withKeyStore(database) { try await $0.list() }
        let now = APIKeyStore.now()
        print(["ID", "STATUS", "CREATED", "EXPIRES", "LAST USED", "READ", "WRITE", "READ RULES", "WRITE RULES", "ATTACHMENTS", "TIME LIMIT",
               "DESCRIPTION"].joined(separator: "\t"))
        for k in keys {
            let status = k.revokedAt != nil ? "revoked" : (k.expiresAt <= now ? "expired" : "active")
            print([k.id, status, formatTime(k.createdAt), formatTime(k.expiresAt), k.lastUsedAt.map(formatTime) ?? "never",
                   k.read.description, k.write.description, k.readRules.description, k.writeRules.description,
                   k.readAttachments ? "any" : "referenced", k.timeLimit.map(CreateKey.describe) ?? "-", k.description].joined(separator: "\t"))
        }
    }
}

struct RevokeKey: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "revoke",
        abstract: "Revoke a key (running servers stop accepting it within their key cache period, 5 s by default).")
    @Argument(help: "The key id (the 16 hex digits after bpk_, as `keys list` shows).") var id: String
    @OptionGroup var database: DatabaseOptions

    func run() async throws {
        guard try await withKeyStore(database, { try await $0.revoke(id: id) }) else {
            throw ValidationError("no key with id \(id)")
        }
        print("revoked \(id)")
    }
}

/// `2026-11-22 09:30:00 UTC` (seconds precision).
func formatTime(_ t: PostgresTimestamp) -> String {
    String(t.postgresText.prefix(19)) + " UTC"
}
