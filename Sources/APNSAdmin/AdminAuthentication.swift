/// The admin token check. With `[admin] token` set, every route but `/health` (and `/login`,
/// which checks the token itself) needs `Authorization: Bearer <token>`, or, for browsers, the
/// cookie that `GET /login?token=<token>` sets. The cookie is `HttpOnly` (no script reads it)
/// and `SameSite=Strict` (no other site's page can make the browser send it, so the page's
/// requeue forms cannot be triggered cross-site). Tokens are compared in constant time. Every
/// state-changing request a browser marks as cross-site or cross-origin is refused, token or not.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

struct AdminAuthentication<Context: RequestContext>: RouterMiddleware {
    static var cookieName: String { "apns_admin_token" }

    let token: String?

    /// The one route the admin page frames (the live graph, `AdminFleetRoutes`).
    static var sameOriginFramePath: String { "/fleet/graph" }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let refusal = Self.crossSiteRefusal(request) { return refusal }
        var response = try await authenticated(request, context: context, next: next)
        // The page has buttons that move jobs: no other site may frame it (clickjacking). The
        // live graph has no button, and the page itself frames it.
        let frameable = request.method == .get && request.uri.path == Self.sameOriginFramePath
        response.headers[HTTPField.Name("X-Frame-Options")!] = frameable ? "SAMEORIGIN" : "DENY"
        response.headers[.contentSecurityPolicy] = frameable ? "frame-ancestors 'self'" : "frame-ancestors 'none'"
        return response
    }

    /// A state-changing request that a browser says comes from another site (or origin) is
    /// refused, token or not: on loopback without a token, any page the operator has open could
    /// otherwise post the requeue and purge forms, and SameSite cookies only stop other
    /// *sites*, not other ports of the same host. Tools like curl send neither header.
    static func crossSiteRefusal(_ request: Request) -> Response? {
        guard request.method != .get, request.method != .head else { return nil }
        var crossSite = false
        if let site = request.headers[HTTPField.Name("Sec-Fetch-Site")!], site != "same-origin", site != "none" {
            crossSite = true
        }
        if let origin = request.headers[.origin] {
            let host = origin.split(separator: "://", maxSplits: 1).last.map(String.init)
            if origin == "null" || host != request.head.authority { crossSite = true }
        }
        guard crossSite else { return nil }
        return Response(
            status: .forbidden, headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(string: #"{"error":"cross-site request refused"}"#)))
    }

    private func authenticated(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let token else { return try await next(request, context) }
        let path = request.uri.path
        if path == "/health" || path == "/login" { return try await next(request, context) }
        if let presented = Self.presentedToken(request), Self.constantTimeEqual(presented, token) {
            return try await next(request, context)
        }
        var headers = HTTPFields()
        headers[.wwwAuthenticate] = "Bearer realm=\"apns-worker\""
        if path == "/" {
            headers[.contentType] = "text/html; charset=utf-8"
            return Response(status: .unauthorized, headers: headers, body: .init(byteBuffer: ByteBuffer(string: Templates.loginPage)))
        }
        headers[.contentType] = "application/json"
        return Response(
            status: .unauthorized, headers: headers,
            body: .init(byteBuffer: ByteBuffer(string: #"{"error":"missing or wrong admin token (Authorization: Bearer <token>)"}"#)))
    }

    /// The bearer token of the `Authorization` header, else the admin cookie's value.
    static func presentedToken(_ request: Request) -> String? {
        if let authorization = request.headers[.authorization] {
            let prefix = "bearer "
            guard authorization.count > prefix.count, authorization.prefix(prefix.count).lowercased() == prefix else { return nil }
            return String(authorization.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces)
        }
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == cookieName {
                    return String(parts[1]).trimmingCharacters(in: .whitespaces)
                }
            }
        }
        return nil
    }

    /// Equal without an early exit: the time taken does not tell how much of a guess was right.
    /// (The length may show; the token's length is no secret worth hiding.)
    static func constantTimeEqual(_ presented: String, _ expected: String) -> Bool {
        let a = Array(presented.utf8), b = Array(expected.utf8)
        var difference: UInt8 = a.count == b.count ? 0 : 1
        for index in 0..<b.count {
            difference |= (index < a.count ? a[index] : 0) ^ b[index]
        }
        return difference == 0
    }

    /// The `Set-Cookie` value `/login` answers with.
    static func cookie(_ token: String) -> String {
        "\(cookieName)=\(token); Path=/; HttpOnly; SameSite=Strict"
    }
}
