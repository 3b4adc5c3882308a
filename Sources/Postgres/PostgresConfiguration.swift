import CLibPQ

/// Where and how to connect: libpq keyword/value parameters, never a concatenated conninfo string.
///
/// `init(url:)` lets libpq's own parser read a `postgresql://` URL (or a `key=value` string) and
/// keeps the keywords it produced, so every libpq option (`sslmode`, `sslrootcert`, `host` with
/// several entries, unix socket directories, ...) passes through unchanged.
public struct PostgresConfiguration: Sendable, CustomStringConvertible {
    public struct Parameter: Sendable, Equatable {
        public var key: String
        public var value: String
        public init(_ key: String, _ value: String) { self.key = key; self.value = value }
    }

    public var parameters: [Parameter]
    /// libpq does not enforce `connect_timeout` in non-blocking mode; this layer does.
    public var connectTimeout: Duration = .seconds(10)

    public init(parameters: [Parameter]) {
        self.parameters = parameters
    }

    public init(url: String) throws(PostgresError) {
        var err: UnsafeMutablePointer<CChar>?
        guard let opts = PQconninfoParse(url, &err) else {
            let message = err.map { String(cString: $0) } ?? "unparseable"
            if let err { PQfreemem(err) }
            throw .invalidConfiguration(message.trimmingTrailingNewlines())
        }
        defer { PQconninfoFree(opts) }
        var params: [Parameter] = []
        var i = 0
        while let kw = opts[i].keyword {
            if let val = opts[i].val { params.append(Parameter(String(cString: kw), String(cString: val))) }
            i += 1
        }
        parameters = params
        if let t = self["connect_timeout"], let s = Int(t), s > 0 { connectTimeout = .seconds(s) }
    }

    public subscript(key: String) -> String? {
        get { parameters.last(where: { $0.key == key })?.value }
        set {
            parameters.removeAll { $0.key == key }
            if let newValue { parameters.append(Parameter(key, newValue)) }
        }
    }

    /// The parameters libpq receives: ours plus the session settings every connection needs
    /// (UTF-8, UTC so timestamps decode without a zone database, an application name).
    var effectiveParameters: [Parameter] {
        var p = self
        p["client_encoding"] = "UTF8"
        if p["application_name"] == nil { p["application_name"] = "bigpeer" }
        let utc = "-c TimeZone=UTC -c bytea_output=hex"
        p["options"] = p["options"].map { "\($0) \(utc)" } ?? utc
        return p.parameters
    }

    /// For logs: every parameter except the password.
    public var description: String {
        parameters.map { $0.key == "password" ? "password=***" : "\($0.key)=\($0.value)" }.joined(separator: " ")
    }
}

extension String {
    func trimmingTrailingNewlines() -> String {
        var s = self
        while s.last == "\n" || s.last == "\r" { s.removeLast() }
        return s
    }
}
