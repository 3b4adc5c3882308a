@testable import HTTP
import Testing

/// `HTTPRouter.wrapHandlers`: every route, static and patterned, is handed over once with its
/// method and path pattern, and what the transform returns is what `match` finds.
@Suite struct HTTPRouterWrapTests {
    static func answer(_ router: HTTPRouter, _ method: HTTPMethod, _ path: String) -> String? {
        guard case .found(.sync(let handler), let parameters) = router.match(method, path: Substring(path)) else { return nil }
        var request = HTTPRequest(head: HTTPRequestHead(method: method, target: path, version: .http1_1, headers: [:], keepAlive: true, expectsContinue: false))
        request.pathParameters = parameters
        guard case .response(let response) = handler(request), case .bytes(let body) = response.body else { return nil }
        return String(decoding: body, as: UTF8.self)
    }

    @Test func everyRouteIsWrappedOnce_withItsMethodAndPattern() {
        var router = HTTPRouter()
        router.get("/a", .immediate { _ in .text("a") })
        router.post("/a", .immediate { _ in .text("post a") })
        router.get("/items/:id", .immediate { r in .text("item \(r.pathParameters["id"] ?? "?")") })
        var seen: [String] = []
        router.wrapHandlers { method, path, handler in
            seen.append("\(method) \(path)")
            guard path != "/a" || method == .GET, case .sync(let inner) = handler else { return handler }
            return .sync { request in
                guard case .response(var response) = inner(request) else { return inner(request) }
                response.headers.add("X-Wrapped", "\(method) \(path)")
                if case .bytes(let b) = response.body { response.body = .bytes(Array("wrapped ".utf8) + b) }
                return .response(response)
            }
        }
        #expect(seen.sorted() == ["GET /a", "GET /items/:id", "POST /a"])
        #expect(Self.answer(router, .GET, "/a") == "wrapped a")
        #expect(Self.answer(router, .POST, "/a") == "post a", "the transform may leave a route as it was")
        #expect(Self.answer(router, .GET, "/items/7") == "wrapped item 7")
    }
}
