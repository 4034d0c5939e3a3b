/// The admin token check. With `[admin] token` set, every route but `/health` (and `/login`,
/// which checks the token itself) needs `Authorization: Bearer <token>`, or, for browsers, the
/// cookie that `GET /login?token=<token>` sets. The cookie is `HttpOnly` (no script reads it)
/// and `SameSite=Strict` (no other site's page can make the browser send it, so the page's
/// requeue forms cannot be triggered cross-site). Tokens are compared in constant time.
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

struct AdminAuthentication<Context: RequestContext>: RouterMiddleware {
    static var cookieName: String { "apns_admin_token" }

    let token: String?

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
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
        var difference = UInt8(truncatingIfNeeded: a.count ^ b.count)
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
