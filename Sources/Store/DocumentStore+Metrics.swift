import Metrics

extension DocumentStore {
    /// Statements per committed write transaction (group commit).
    public var writeBatchSizes: Histogram { batcher.batchSizes }
    /// Time from a write batch's BEGIN to its COMMIT's answer.
    public var writeTransactionTime: Histogram { batcher.transactionTime }
}
