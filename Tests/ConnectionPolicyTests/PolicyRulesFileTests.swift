import BigPeerTestSupport
@testable import ConnectionPolicy
import Glibc
import Testing

@Suite struct PolicyRulesFileTests {
    static let denyX = #"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceName": "x"}]}"#
    static let denyY = #"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceName": "y"}, {"action": "allow", "deviceName": "z"}]}"#

    @Test func changedFile_isReadAgain_badVersionKeepsThePreviousRules() throws {
        let dir = try TemporaryDirectory()
        try dir.write("policy.json", Self.denyX)
        let file = try PolicyRulesFile(path: "\(dir.path)/policy.json")
        #expect(file.current.firstMatch(candidate(name: "x")) != nil)
        #expect(file.reloadIfChanged() == .unchanged)

        try dir.write("policy.json", Self.denyY)
        #expect(file.reloadIfChanged() == .reloaded(rules: 2))
        #expect(file.current.firstMatch(candidate(name: "x")) == nil)
        #expect(file.current.firstMatch(candidate(name: "y")) != nil)

        try dir.write("policy.json", #"{"version": 1, "default": "allow", "rules": [{"action": "deny", "deviceNmae": "y"}]}"#)
        guard case .rejected(let error) = file.reloadIfChanged() else { Issue.record("a bad version was taken"); return }
        #expect(error.description.contains("policy.json: rule 1: unknown key \"deviceNmae\""), "\(error)")
        #expect(file.current.firstMatch(candidate(name: "y")) != nil, "the previous rules stay")
        #expect(file.reloadIfChanged() == .unchanged, "a bad version is reported once")

        // A removed file is a bad version too: the rules in force stay.
        unlink("\(dir.path)/policy.json")
        guard case .rejected = file.reloadIfChanged() else { Issue.record("a missing file was taken"); return }
        #expect(file.current.rules.count == 2)
    }

    @Test func badOrMissingFile_atStart_isAnErrorNamingIt() throws {
        let dir = try TemporaryDirectory()
        #expect(throws: PolicyConfigurationError.self) { try PolicyRulesFile(path: "\(dir.path)/absent.json") }
        try dir.write("big.json", String(repeating: " ", count: 300 << 10))
        do {
            _ = try PolicyRulesFile(path: "\(dir.path)/big.json")
            Issue.record("a 300 KiB file was read")
        } catch {
            #expect(error.description == "\(dir.path)/big.json: the file has 307200 bytes (at most 262144)")
        }
        try dir.write("bad.json", "{\n\"version\": 1,\n\"default\": \"allow\",\n\"rules\": [}\n")
        do {
            _ = try PolicyRulesFile(path: "\(dir.path)/bad.json")
            Issue.record("bad JSON was read")
        } catch {
            #expect(error.location == "\(dir.path)/bad.json: line 4, column 11", "\(error)")
        }
    }

    @Test(.timeLimit(.minutes(1))) func watch_reportsAReload() async throws {
        let dir = try TemporaryDirectory()
        try dir.write("policy.json", Self.denyX)
        let file = try PolicyRulesFile(path: "\(dir.path)/policy.json")
        let (outcomes, continuation) = AsyncStream.makeStream(of: PolicyRulesFile.ReloadOutcome.self)
        let task = file.watch(every: .milliseconds(10)) { continuation.yield($0) }
        defer { task.cancel() }
        try dir.write("policy.json", Self.denyY)
        var iterator = outcomes.makeAsyncIterator()
        #expect(await iterator.next() == .reloaded(rules: 2))
    }
}
