/// TLS settings shared by the HTTP/2 and binary transports and the feedback client: whom to
/// trust for the server's certificate, how the client context is built (full verification,
/// optional client certificate) and which name SNI sends, so they cannot drift apart.
import NIOCore
import NIOSSL

/// Whom to trust for the server's certificate.
public enum TLSTrustRoots: Sendable, Hashable {
    /// The system's trust store.
    case system
    /// Only the certificates in this PEM file (a test CA, a simulator).
    case caFile(String)
}

enum ClientTLS {
    /// A client context with full verification against `trustRoots`, presenting the PEM
    /// certificate chain and key when given, offering `applicationProtocols` via ALPN.
    static func makeContext(
        trustRoots: TLSTrustRoots, certificate: (certFile: String, keyFile: String)?, applicationProtocols: [String]
    ) throws -> NIOSSLContext {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = applicationProtocols
        tls.certificateVerification = .fullVerification
        switch trustRoots {
        case .system: tls.trustRoots = .default
        case .caFile(let path): tls.trustRoots = .file(path)
        }
        if let certificate {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(certificate.certFile).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: certificate.keyFile, format: .pem))
        }
        return try NIOSSLContext(configuration: tls)
    }

    /// The TLS handler for a connection to `host`. SNI carries names only; an IP literal is
    /// verified against the certificate's IP SANs instead.
    static func handler(context: NIOSSLContext, host: String) throws -> NIOSSLClientHandler {
        let isIPAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
        return try NIOSSLClientHandler(context: context, serverHostname: isIPAddress ? nil : host)
    }
}
