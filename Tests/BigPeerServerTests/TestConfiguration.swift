import BigPeerServer
import BigPeerTestSupport

extension ServerConfiguration {
    /// An in-process server for one test: any free port, one loop, the test's own database.
    static func forTest(_ db: TestDatabase, insecureDevelopment: Bool = false) -> ServerConfiguration {
        var config = InProcessServer.configuration(db)
        config.insecureDevelopment = insecureDevelopment
        return config
    }
}
