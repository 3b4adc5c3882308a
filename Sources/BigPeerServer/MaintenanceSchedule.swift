import Logging
import Store

/// Runs `DocumentStore.runMaintenance` every interval until cancelled (`BigPeerService.stop`).
/// Every instance schedules it; the store's advisory lock lets one at a time do the work. A
/// failed run (database unavailable, say) is logged and tried again next time: maintenance is
/// never urgent, and must never take the server down.
enum MaintenanceSchedule {
    static func run(_ store: DocumentStore, every interval: Duration, logger: Logger) async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: interval) } catch { return }
            do {
                let report = try await store.runMaintenance()
                if report.reapedTombstones > 0 || report.prunedChangeLogRows > 0 {
                    logger.notice("maintenance", metadata: [
                        "reapedTombstones": "\(report.reapedTombstones)",
                        "prunedChangeLogRows": "\(report.prunedChangeLogRows)",
                        "prunedThroughTxn": "\(report.prunedThrough.map { String($0) } ?? "-")",
                    ])
                }
            } catch {
                logger.warning("maintenance failed; retrying next interval", metadata: ["error": "\(error)"])
            }
        }
    }
}
