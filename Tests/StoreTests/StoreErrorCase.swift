@testable import Store

/// Which case a `StoreError` is, without its payload: what a test checks when it asks whose fault
/// a failure is (the REST statuses of the cases are BigPeerServer's, tested there).
enum StoreErrorCase: Equatable {
    case syntax, invalid, conflict, notFound, tooLarge, forbidden, resultTooLarge, unknownTransaction, timeout, busy, unavailable, database, corrupt

    init(_ error: StoreError) {
        switch error {
        case .syntax: self = .syntax
        case .invalid: self = .invalid
        case .conflict: self = .conflict
        case .notFound: self = .notFound
        case .tooLarge: self = .tooLarge
        case .forbidden: self = .forbidden
        case .resultTooLarge: self = .resultTooLarge
        case .unknownTransaction: self = .unknownTransaction
        case .timeout: self = .timeout
        case .busy: self = .busy
        case .unavailable: self = .unavailable
        case .database: self = .database
        case .corrupt: self = .corrupt
        }
    }
}
