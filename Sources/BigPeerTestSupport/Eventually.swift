/// Waits until `condition` holds: checks it, then again every 10 ms, on the continuous clock,
/// until `timeout` has passed; returns whether it held (checked once more at the deadline).
///
/// For a state another thread or process reaches by itself (a connection closed, a row written, a
/// counter moved). The deadline only bounds a failure: a passing test waits as long as the state
/// takes, so the default is generous for a loaded machine, and a test never asserts on how long it
/// took. Use `#expect(await eventually { … }, "what")` so a timeout says what was awaited.
///
/// 60 s: on the 2-core CI machine the parallel run keeps both of Swift's cooperative threads busy
/// with CPU-bound tests for tens of seconds at a time, and a task that needs one (a relay's flush,
/// a client's store step) waited longer than the former 20 s (2026-11-26, twice in a row).
public func eventually(within timeout: Duration = .seconds(60), _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        if Task.isCancelled { break }
        try? await Task.sleep(for: .milliseconds(10))
    }
    return try await condition()
}
