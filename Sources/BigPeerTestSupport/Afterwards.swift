/// Runs `body`, then `cleanup`, whether `body` returned or threw (a `defer` cannot await).
public func afterwards<R>(_ cleanup: () async -> Void, _ body: () async throws -> R) async throws -> R {
    let result: R
    do {
        result = try await body()
    } catch {
        await cleanup()
        throw error
    }
    await cleanup()
    return result
}
