import Values

/// The outcome of one DQL statement, shaped like Ditto's HTTP API v4 response.
public struct ExecuteResult: Sendable {
    /// The transaction number the result reflects: for writes, the commit that made them; for
    /// reads, the newest commit visible to the read.
    public var transactionID: Int64
    /// `select`, `insert`, `update`, `delete`, `evict`, `alter`, `show`, `create_index`, `drop_index`, `explain`.
    public var queryType: String
    public var items: [Value]
    /// When set, `JSON.serialize(items[i])` for every item, already made (a read-cache hit keeps
    /// its document serialized); encoders may copy these bytes instead of serializing `items`.
    public var itemsJSON: [[UInt8]]?
    /// `_id`s of the documents the statement changed, in statement order.
    public var mutatedDocumentIDs: [Value]
    public var warnings: [String]
    /// Sync uploads only: the entries that were not merged, by index, with the reason.
    public var rejections: [(index: Int, message: String)] = []

    public init(transactionID: Int64, queryType: String, items: [Value] = [], mutatedDocumentIDs: [Value] = [], warnings: [String] = []) {
        self.transactionID = transactionID
        self.queryType = queryType
        self.items = items
        self.mutatedDocumentIDs = mutatedDocumentIDs
        self.warnings = warnings
    }
}
