@testable import BigPeerServer
import Foundation
@testable import Migrations
import Postgres
import Testing

/// The binary carries the repository's migrations and openapi.yaml (Sources/Migrations/
/// EmbeddedMigrations.swift and Sources/BigPeerServer/EmbeddedResources.swift, written by
/// scripts/embed-resources.py): these tests fail as soon as a generated file and the files it was
/// made from differ, so they cannot drift apart.
@Suite struct EmbeddedResourcesTests {
    /// The package root, from this file's path (not the working directory).
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    static let regenerate = "out of date: run scripts/embed-resources.py"

    @Test func embeddedMigrationsAreTheRepositorysFilesByteForByte() throws {
        let dir = Self.root + "/migrations"
        let onDisk = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".sql") }.sorted()
        #expect(EmbeddedMigrations.files.map(\.name) == onDisk, "\(Self.regenerate)")
        for (name, sql) in EmbeddedMigrations.files {
            let bytes = try #require(FileManager.default.contents(atPath: dir + "/" + name), "\(name) \(Self.regenerate)")
            #expect(Array(sql.utf8) == [UInt8](bytes), "\(name) \(Self.regenerate)")
        }
        // Parsed the same way as a directory (versions, order, checksummed text).
        #expect(try MigrationSet.embedded() == Migration.load(directory: dir))
    }

    @Test func embeddedOpenAPIIsTheRepositorysFileByteForByte() throws {
        let bytes = try #require(FileManager.default.contents(atPath: Self.root + "/openapi.yaml"))
        #expect(Array(EmbeddedResources.openAPI.utf8) == [UInt8](bytes), "openapi.yaml \(Self.regenerate)")
        #expect(try OpenAPIRoute.load().document == [UInt8](bytes))
    }

    /// Nothing is searched for: no directory means the built-in set, wherever the process runs.
    @Test(.disabled(if: ProcessInfo.processInfo.environment[MigrationSet.environmentVariable] != nil, "a migrations directory is set in the environment"))
    func noDirectoryMeansTheBuiltInMigrations() throws {
        let resolved = try MigrationSet.resolve(directory: nil)
        #expect(resolved.origin == MigrationSet.builtIn)
        #expect(resolved.migrations == (try MigrationSet.embedded()))
        #expect(throws: PostgresError.self) { try MigrationSet.resolve(directory: "/nonexistent-bigpeer-migrations") }
    }
}
