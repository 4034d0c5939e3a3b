/// The admin's access checks on every request (the model is in docs/decisions.md):
/// - without `[admin] token` (loopback only), a request whose `Host` is not one of
///   `AdminHostAllowlist` is refused, so a DNS-rebinding page cannot pass for same-origin;
/// - with a token, every route but `/health` and `POST /login` needs `Authorization: Bearer
///   <token>`, or, for browsers, the session cookie `POST /login` sets (`AdminSessions`: not the
///   token, expires, `HttpOnly`, `SameSite=Strict`, `Secure` over TLS). Tokens are compared in
///   constant time;
/// - `[admin] metricsToken`, when set, is a second bearer token that opens `GET /metrics` and
///   nothing else: Prometheus scrapes with it and never holds the token that can purge jobs;
/// - every state-changing request a browser marks as cross-site or cross-origin is refused,
///   token or not.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

struct AdminAuthentication<Context: RequestContext>: RouterMiddleware {
    let token: String?
    /// The read-only credential: `GET /metrics` only.
    let metricsToken: String?
    /// The names a token-less admin answers to; unused with a token.
    let hosts: AdminHostAllowlist
    /// The browser sessions; nil without a token.
    let sessions: AdminSessions?

    init(token: String?, metricsToken: String? = nil, hosts: AdminHostAllowlist) {
        self.token = token
        self.metricsToken = metricsToken
        self.hosts = hosts
        self.sessions = token.map { AdminSessions(token: $0) }
    }

    /// The one route the metrics token opens.
    static var metricsPath: String { "/metrics" }

    /// The one route the admin page frames (the live graph, `AdminFleetRoutes`).
    static var sameOriginFramePath: String { "/fleet/graph" }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if token == nil, !hosts.allows(request.head.authority) {
            return Self.refusal(.forbidden, "this admin answers only to its own host names (see [admin] allowedHosts)")
        }
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
        return refusal(.forbidden, "cross-site request refused")
    }

    static func refusal(_ status: HTTPResponse.Status, _ message: String) -> Response {
        AdminRoutes.error(status, message)
    }

    private func authenticated(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let token else { return try await next(request, context) }
        let path = request.uri.path
        if path == "/health" || (path == "/login" && request.method == .post) { return try await next(request, context) }
        if let presented = Self.bearerToken(request) {
            if Self.constantTimeEqual(presented, token) { return try await next(request, context) }
            if let metricsToken, path == Self.metricsPath, request.method == .get || request.method == .head,
                Self.constantTimeEqual(presented, metricsToken)
            {
                return try await next(request, context)
            }
        }
        if let sessions, let cookie = Self.sessionCookie(request), sessions.isValid(cookie, now: Date()) {
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

    /// The bearer token of the `Authorization` header.
    static func bearerToken(_ request: Request) -> String? {
        guard let authorization = request.headers[.authorization] else { return nil }
        let prefix = "bearer "
        guard authorization.count > prefix.count, authorization.prefix(prefix.count).lowercased() == prefix else { return nil }
        return String(authorization.dropFirst(prefix.count)).trimmingCharacters(in: .whitespaces)
    }

    /// The session cookie's value, if the request carries one.
    static func sessionCookie(_ request: Request) -> String? {
        for header in request.headers[values: .cookie] {
            for pair in header.split(separator: ";") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == AdminSessions.cookieName {
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
}

/// At most `gate.limit` operator requests at once; one more is answered 503 with `Retry-After`
/// at once. The probes and `/metrics` pass: a monitor must see a busy admin as alive.
struct AdminRequestLimit<Context: RequestContext>: RouterMiddleware {
    let gate: AdminRequestGate

    static var exempt: Set<String> { ["/health", "/ready", "/metrics"] }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if Self.exempt.contains(request.uri.path) { return try await next(request, context) }
        guard gate.enter() else {
            var response = AdminRoutes.error(.serviceUnavailable, "busy: \(gate.limit) operator requests are being served; try again")
            response.headers[.retryAfter] = "1"
            return response
        }
        defer { gate.leave() }
        return try await next(request, context)
    }
}
