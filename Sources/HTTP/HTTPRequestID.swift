extension HTTPRequest {
    /// A request's id as logs and responses carry it: the client's `X-Request-ID` when it is
    /// sane (1…128 visible ASCII characters), else `processTag-loop-sequence`, unique within the
    /// process. Kept as numbers until printed, so a request that logs nothing formats nothing.
    public struct LogID: Sendable, CustomStringConvertible {
        let loop: Int
        let number: UInt64
        let given: String?

        init(head: HTTPRequestHead, sequence: (loop: Int, number: UInt64)) {
            loop = sequence.loop
            number = sequence.number
            given = head.headers["X-Request-ID"].flatMap { Self.isSane($0) ? $0 : nil }
        }

        static func isSane(_ id: String) -> Bool {
            !id.isEmpty && id.utf8.count <= 128 && id.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F }
        }

        public var description: String { given ?? "\(HTTPRequest.processTag)-\(loop)-\(number)" }

        /// Appends the id's bytes (the response header; the access log formats it itself,
        /// `AccessLogFormatter`).
        func append(to out: inout [UInt8]) {
            if let given {
                out.append(contentsOf: given.utf8)
                return
            }
            out.append(contentsOf: HTTPRequest.processTag.utf8)
            out.append(0x2D)
            ResponseHeadWriter.appendDecimal(loop, to: &out)
            out.append(0x2D)
            ResponseHeadWriter.appendDecimal(Int(truncatingIfNeeded: number), to: &out)
        }
    }

    /// This request's id (see `LogID`).
    public var logID: LogID { LogID(head: head, sequence: sequence) }

    /// The id of the request whose handler is running in this task: `bigpeer serve`'s log
    /// handler adds it to every line logged there (`request_id`).
    @TaskLocal public static var currentLogID: LogID?
}
