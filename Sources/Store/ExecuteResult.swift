import Values

/// The outcome of one DQL statement, shaped like Ditto's HTTP API v4 response.
public struct ExecuteResult: Sendable {
    /// The transaction number the result reflects: for writes, the commit that made them; for
    /// reads, the newest commit visible to the read.
    public var transactionID: Int64
    /// `select`, `insert`, `update`, `delete`, `evict`, `alter`, `show`, `create_index`, `drop_index`, `explain`.
    public var queryType: String
    /// The result rows. For a read answered from the point-read cache they are held as JSON text
    /// only (`itemsJSON`) and parsed here on first use — most responses are JSON and copy the text.
    public var items: [Value] {
        get {
            switch storage {
            case .values(let v): return v
            // The text was produced by `JSON.serialize`, so it always parses; `.null` is unreachable.
            case .json(let texts): return texts.map { (try? JSON.parse($0, limits: .stored)) ?? .null }
            }
        }
        set { storage = .values(newValue) }
    }
    /// `JSON.serialize(items[i])` for every item, when already made (a point read keeps its
    /// document serialized); encoders copy these bytes instead of serializing `items`.
    public var itemsJSON: [[UInt8]]? {
        if case .json(let texts) = storage { texts } else { nil }
    }
    enum Items: Sendable {
        case values([Value])
        case json([[UInt8]])
    }
    var storage: Items
    /// `_id`s of the documents the statement changed, in statement order.
    public var mutatedDocumentIDs: [Value]
    public var warnings: [String]
    /// Sync uploads only: the entries that were not merged, by index, with the reason.
    public var rejections: [(index: Int, message: String)] = []

    public init(transactionID: Int64, queryType: String, items: [Value] = [], mutatedDocumentIDs: [Value] = [], warnings: [String] = []) {
        self.transactionID = transactionID
        self.queryType = queryType
        self.storage = .values(items)
        self.mutatedDocumentIDs = mutatedDocumentIDs
        self.warnings = warnings
    }

    /// A read result whose items are JSON texts made by `JSON.serialize`.
    public init(transactionID: Int64, queryType: String, itemsJSON: [[UInt8]]) {
        self.init(transactionID: transactionID, queryType: queryType)
        self.storage = .json(itemsJSON)
    }
}
