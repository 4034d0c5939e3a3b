/// Throwaway credentials for the simulator and the worker that talks to it: a CA, a server
/// certificate for 127.0.0.1 and localhost, a client certificate for certificate-based
/// authentication, and a `.p8` provider token key. Generated on demand, never committed.
import Crypto
import Foundation
import SwiftASN1
import X509

/// Where `SimulatorCredentials.generate` wrote everything, and the keys in memory.
public struct GeneratedCredentials: Sendable {
    public var directory: String
    public var teamID: String
    public var keyID: String
    /// `ca.pem`: trust this to talk to the simulator; it also signed the client certificate.
    public var caCertificatePath: String
    /// `server.pem` / `server.key`: the simulator's TLS identity.
    public var serverCertificatePath: String
    public var serverKeyPath: String
    /// `client.pem` / `client.key`: a provider certificate for certificate-based authentication.
    public var clientCertificatePath: String
    public var clientKeyPath: String
    /// `AuthKey_<keyID>.p8`: PKCS#8 PEM, as Apple hands it out.
    public var tokenKeyPath: String

    public var caCertificatePEM: String
    public var serverCertificatePEM: String
    public var serverKeyPEM: String
    public var tokenPrivateKey: P256.Signing.PrivateKey

    /// The simulator's TLS configuration for these credentials: this server identity, client
    /// certificates verified against this CA when presented.
    public func tlsConfiguration(requireClientCertificate: Bool = false) -> SimulatorTLSConfiguration {
        SimulatorTLSConfiguration(
            certificateChainPEM: serverCertificatePEM, privateKeyPEM: serverKeyPEM, clientCAPEM: caCertificatePEM,
            requireClientCertificate: requireClientCertificate)
    }

    /// The provider token key the simulator should accept.
    public var tokenKey: SimulatorTokenKey {
        SimulatorTokenKey(keyID: keyID, teamID: teamID, publicKey: tokenPrivateKey.publicKey)
    }

    /// A provider token (ES256 JWT) signed with this set's `.p8` key, for tools and tests that
    /// talk to the simulator without the transport; `keyID`/`teamID` override the claims.
    public func providerToken(issuedAt: Date = Date(), keyID: String? = nil, teamID: String? = nil) throws -> String {
        let header = "{\"alg\":\"ES256\",\"kid\":\"\(keyID ?? self.keyID)\"}"
        let claims = "{\"iss\":\"\(teamID ?? self.teamID)\",\"iat\":\(Int64(issuedAt.timeIntervalSince1970))}"
        let signingInput = Base64URL.encode(header.utf8) + "." + Base64URL.encode(claims.utf8)
        let signature = try tokenPrivateKey.signature(for: Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature.rawRepresentation)
    }
}

public enum SimulatorCredentials {
    public struct Error: Swift.Error, CustomStringConvertible {
        public var description: String
    }

    /// The file names inside the credentials directory.
    public enum FileName {
        public static let ca = "ca.pem"
        public static let serverCertificate = "server.pem"
        public static let serverKey = "server.key"
        public static let clientCertificate = "client.pem"
        public static let clientKey = "client.key"
        public static func tokenKey(keyID: String) -> String { "AuthKey_\(keyID).p8" }
    }

    /// Writes a fresh set into `directory` (created if needed; existing files are replaced).
    /// Private keys are written with mode 0600. `clientBundleID` names the app the client
    /// certificate is for, as Apple's provider certificates do in their subject. `serverNames`
    /// are extra DNS names for the server certificate, beside localhost and 127.0.0.1, for a
    /// simulator reached by another name (the `simulator` service of docker-compose.yml).
    public static func generate(
        into directory: String, teamID: String, keyID: String, clientBundleID: String = "com.example.app",
        serverNames: [String] = []
    ) throws -> GeneratedCredentials {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let now = Date()
        let notBefore = now.addingTimeInterval(-3600)
        let notAfter = now.addingTimeInterval(3 * 365 * 24 * 3600)

        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            OrganizationName("apns-worker simulator")
            CommonName("apns-worker simulator CA")
        }
        let caKeyID = keyIdentifier(caKey.publicKey)
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey),
            notValidBefore: notBefore, notValidAfter: notAfter, issuer: caName, subject: caName,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true, cRLSign: true))
                SubjectKeyIdentifier(keyIdentifier: caKeyID)
            },
            issuerPrivateKey: .init(caKey))

        let issuer = LeafIssuer(name: caName, key: caKey, keyID: caKeyID, notBefore: notBefore, notAfter: notAfter)
        let serverKey = P256.Signing.PrivateKey()
        let server = try issuer.leaf(
            commonName: "localhost", key: serverKey, usage: .serverAuth,
            alternativeNames: [.dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))]
                + serverNames.map { .dnsName($0) })
        let clientKey = P256.Signing.PrivateKey()
        let client = try issuer.leaf(
            commonName: "Apple Push Services: \(clientBundleID)", key: clientKey, usage: .clientAuth, alternativeNames: nil)

        let tokenKey = P256.Signing.PrivateKey()

        let path = { (name: String) in (directory as NSString).appendingPathComponent(name) }
        let caPEM = try ca.serializeAsPEM().pemString + "\n"
        let serverPEM = try server.serializeAsPEM().pemString + "\n"
        let serverKeyPEM = serverKey.pemRepresentation + "\n"
        try write(caPEM, to: path(FileName.ca), secret: false)
        try write(serverPEM, to: path(FileName.serverCertificate), secret: false)
        try write(serverKeyPEM, to: path(FileName.serverKey), secret: true)
        try write(try client.serializeAsPEM().pemString + "\n", to: path(FileName.clientCertificate), secret: false)
        try write(clientKey.pemRepresentation + "\n", to: path(FileName.clientKey), secret: true)
        try write(tokenKey.pemRepresentation + "\n", to: path(FileName.tokenKey(keyID: keyID)), secret: true)

        return GeneratedCredentials(
            directory: directory, teamID: teamID, keyID: keyID,
            caCertificatePath: path(FileName.ca), serverCertificatePath: path(FileName.serverCertificate),
            serverKeyPath: path(FileName.serverKey), clientCertificatePath: path(FileName.clientCertificate),
            clientKeyPath: path(FileName.clientKey), tokenKeyPath: path(FileName.tokenKey(keyID: keyID)),
            caCertificatePEM: caPEM, serverCertificatePEM: serverPEM, serverKeyPEM: serverKeyPEM,
            tokenPrivateKey: tokenKey)
    }

    /// Reads a set written by `generate` earlier.
    public static func load(from directory: String, teamID: String, keyID: String) throws -> GeneratedCredentials {
        let path = { (name: String) in (directory as NSString).appendingPathComponent(name) }
        func read(_ name: String) throws -> String {
            guard let text = FileManager.default.contents(atPath: path(name)).map({ String(decoding: $0, as: UTF8.self) }) else {
                throw Error(description: "cannot read \(path(name))")
            }
            return text
        }
        let tokenKeyPEM = try read(FileName.tokenKey(keyID: keyID))
        let tokenKey: P256.Signing.PrivateKey
        do {
            tokenKey = try P256.Signing.PrivateKey(pemRepresentation: tokenKeyPEM)
        } catch {
            throw Error(description: "\(path(FileName.tokenKey(keyID: keyID))): not a P-256 private key in PEM: \(error)")
        }
        _ = try read(FileName.clientCertificate)
        _ = try read(FileName.clientKey)
        return GeneratedCredentials(
            directory: directory, teamID: teamID, keyID: keyID,
            caCertificatePath: path(FileName.ca), serverCertificatePath: path(FileName.serverCertificate),
            serverKeyPath: path(FileName.serverKey), clientCertificatePath: path(FileName.clientCertificate),
            clientKeyPath: path(FileName.clientKey), tokenKeyPath: path(FileName.tokenKey(keyID: keyID)),
            caCertificatePEM: try read(FileName.ca), serverCertificatePEM: try read(FileName.serverCertificate),
            serverKeyPEM: try read(FileName.serverKey), tokenPrivateKey: tokenKey)
    }

    /// `load` when the directory holds a complete set for this key ID, else `generate`.
    public static func loadOrGenerate(
        directory: String, teamID: String, keyID: String, serverNames: [String] = []
    ) throws -> GeneratedCredentials {
        let files = [
            FileName.ca, FileName.serverCertificate, FileName.serverKey, FileName.clientCertificate, FileName.clientKey,
            FileName.tokenKey(keyID: keyID),
        ]
        let complete = files.allSatisfy { FileManager.default.fileExists(atPath: (directory as NSString).appendingPathComponent($0)) }
        return complete
            ? try load(from: directory, teamID: teamID, keyID: keyID)
            : try generate(into: directory, teamID: teamID, keyID: keyID, serverNames: serverNames)
    }

    /// The simulator CA signing its two leaf certificates, which differ only in name, usage and
    /// alternative names.
    private struct LeafIssuer {
        var name: DistinguishedName
        var key: P256.Signing.PrivateKey
        var keyID: ArraySlice<UInt8>
        var notBefore: Date
        var notAfter: Date

        func leaf(
            commonName: String, key leafKey: P256.Signing.PrivateKey, usage: ExtendedKeyUsage.Usage,
            alternativeNames: [GeneralName]?
        ) throws -> Certificate {
            try Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey),
                notValidBefore: notBefore, notValidAfter: notAfter, issuer: name,
                subject: try DistinguishedName {
                    OrganizationName("apns-worker simulator")
                    CommonName(commonName)
                },
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true))
                    try ExtendedKeyUsage([usage])
                    if let alternativeNames { SubjectAlternativeNames(alternativeNames) }
                    SubjectKeyIdentifier(keyIdentifier: SimulatorCredentials.keyIdentifier(leafKey.publicKey))
                    AuthorityKeyIdentifier(keyIdentifier: keyID)
                },
                issuerPrivateKey: .init(key))
        }
    }

    /// RFC 5280 §4.2.1.2 method 1: SHA-1 of the public key bits.
    fileprivate static func keyIdentifier(_ key: P256.Signing.PublicKey) -> ArraySlice<UInt8> {
        ArraySlice(Insecure.SHA1.hash(data: key.x963Representation))
    }

    private static func write(_ text: String, to path: String, secret: Bool) throws {
        let attributes: [FileAttributeKey: Any]? = secret ? [.posixPermissions: 0o600] : nil
        if FileManager.default.fileExists(atPath: path) { try FileManager.default.removeItem(atPath: path) }
        guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: attributes) else {
            throw Error(description: "cannot write \(path)")
        }
    }
}
