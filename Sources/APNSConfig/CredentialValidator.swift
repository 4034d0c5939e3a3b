import Crypto
import Foundation
import SwiftASN1
import X509

/// Opens the credential files a configuration names and checks them the way the TLS stack and
/// the JWT signer will use them, so a bad file fails `check-config` and start-up, not the first
/// job: `.p8` keys are PEM EC P-256 private keys, `certFile` a PEM X.509 certificate, `keyFile`
/// a PEM private key whose public key is the certificate's, `caFile` one or more PEM certificates.
public enum CredentialValidator {
    static func validate(
        _ configuration: WorkerConfiguration, document: ConfigDocument, settings: LayeredSettings
    ) throws(ConfigurationError) {
        if let caFile = configuration.amqp.caFile, let setting = settings.string("amqp", "caFile") {
            try check(at: setting.location, section: "[amqp]", key: "caFile") { () throws(CredentialProblem) in
                try checkCAFile(caFile)
            }
        }
        if let certFile = configuration.admin.certFile, let keyFile = configuration.admin.keyFile {
            try checkPair(
                certFile: certFile, keyFile: keyFile, section: "[admin]",
                location: { key in settings.string("admin", key)?.location ?? .file(path: document.path, line: nil) })
        }
        for bundle in configuration.bundles {
            guard let section = document.sections.first(where: {
                $0.name.lowercased() == "apns" && $0.subsection == bundle.bundleID
            }) else { continue }
            let location = { (key: String) in
                ConfigLocation.file(path: document.path, line: section.entries(forKey: key).last?.line ?? section.line)
            }
            switch bundle.auth {
            case .token(_, let keyID, let tokenKeyFile):
                try check(at: location("tokenKeyFile"), section: section.displayName, key: "tokenKeyFile") {
                    () throws(CredentialProblem) in try checkTokenKey(tokenKeyFile, keyID: keyID)
                }
            case .certificate(let certFile, let keyFile):
                try checkPair(certFile: certFile, keyFile: keyFile, section: section.displayName, location: location)
            }
            if let caFile = bundle.caFile {
                try check(at: location("caFile"), section: section.displayName, key: "caFile") {
                    () throws(CredentialProblem) in try checkCAFile(caFile)
                }
            }
        }
    }

    /// A PEM certificate and the PEM private key that goes with it.
    private static func checkPair(
        certFile: String, keyFile: String, section: String, location: (String) -> ConfigLocation
    ) throws(ConfigurationError) {
        var certificate: Certificate?
        try check(at: location("certFile"), section: section, key: "certFile") {
            () throws(CredentialProblem) in certificate = try loadCertificate(certFile)
        }
        try check(at: location("keyFile"), section: section, key: "keyFile") {
            () throws(CredentialProblem) in
            let key = try loadPrivateKey(keyFile)
            if let certificate, certificate.publicKey != key.publicKey {
                var certLine = ""
                if case .file(_, let line?) = location("certFile") { certLine = " (line \(line))" }
                throw CredentialProblem(
                    "\(keyFile) does not match the certificate in certFile\(certLine): their public keys differ")
            }
        }
    }

    /// A credential problem, before file, line and key are added.
    public struct CredentialProblem: Error, Sendable {
        public var message: String
        public init(_ message: String) { self.message = message }
    }

    private static func check(
        at location: ConfigLocation, section: String, key: String, _ body: () throws(CredentialProblem) -> Void
    ) throws(ConfigurationError) {
        do {
            try body()
        } catch {
            throw ConfigurationError(.credential, at: location, section: section, key: key, error.message)
        }
    }

    static func readText(_ path: String) throws(CredentialProblem) -> String {
        let data: Data
        do {
            data = try BoundedFile.read(path, limit: BoundedFile.credentialLimit)
        } catch .unreadable(let why) {
            throw CredentialProblem("cannot read \(path) (\(why))")
        } catch {
            throw CredentialProblem("\(path) \(error)")
        }
        guard let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN ") else {
            throw CredentialProblem("\(path) is not a PEM file (binary DER? convert it with openssl … -outform pem)")
        }
        return text
    }

    /// The PEM blocks of a text whose label is `label`, each with its BEGIN and END lines.
    static func pemBlocks(_ text: String, label: String) -> [String] {
        let begin = "-----BEGIN \(label)-----"
        let end = "-----END \(label)-----"
        var blocks: [String] = []
        var rest = text[...]
        while let start = rest.range(of: begin), let stop = rest[start.upperBound...].range(of: end) {
            blocks.append(String(rest[start.lowerBound..<stop.upperBound]))
            rest = rest[stop.upperBound...]
        }
        return blocks
    }

    /// An APNs auth key (`AuthKey_<KEYID>.p8`): PKCS#8 or SEC1 PEM of an EC P-256 private key.
    public static func checkTokenKey(_ path: String, keyID: String) throws(CredentialProblem) {
        let text = try readText(path)
        do {
            _ = try P256.Signing.PrivateKey(pemRepresentation: text)
        } catch {
            throw CredentialProblem("\(path) is not a PEM EC P-256 private key (an APNs .p8 auth key)")
        }
        // Apple names the download after its key ID: a mismatch means the wrong key file.
        let name = URL(fileURLWithPath: path).deletingPathExtension().lastPathComponent
        if name.hasPrefix("AuthKey_"), name.dropFirst("AuthKey_".count) != keyID {
            throw CredentialProblem("\(path) is the key of \(name.dropFirst("AuthKey_".count)), not of keyId \(keyID)")
        }
    }

    /// The first certificate of a PEM file (a chain may follow it).
    public static func loadCertificate(_ path: String) throws(CredentialProblem) -> Certificate {
        let text = try readText(path)
        guard let first = pemBlocks(text, label: "CERTIFICATE").first else {
            throw CredentialProblem("\(path) is not a PEM X.509 certificate (no CERTIFICATE block)")
        }
        do {
            return try Certificate(pemEncoded: first)
        } catch {
            throw CredentialProblem("\(path) is not a PEM X.509 certificate (\(error))")
        }
    }

    /// A PEM private key: PKCS#8, SEC1 (EC) or PKCS#1 (RSA).
    public static func loadPrivateKey(_ path: String) throws(CredentialProblem) -> Certificate.PrivateKey {
        let text = try readText(path)
        if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") || text.contains("Proc-Type: 4,ENCRYPTED") {
            throw CredentialProblem("\(path) is encrypted; store it decrypted (openssl pkey -in key -out plain.key)")
        }
        let block = ["PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY"].lazy.compactMap { pemBlocks(text, label: $0).first }.first
        guard let block else {
            throw CredentialProblem("\(path) is not a PEM private key (no PRIVATE KEY block)")
        }
        do {
            return try Certificate.PrivateKey(pemEncoded: block)
        } catch {
            throw CredentialProblem("\(path) is not a usable PEM private key (\(error))")
        }
    }

    /// One or more PEM certificates to trust.
    public static func checkCAFile(_ path: String) throws(CredentialProblem) {
        let text = try readText(path)
        let blocks = pemBlocks(text, label: "CERTIFICATE")
        guard !blocks.isEmpty else {
            throw CredentialProblem("\(path) holds no PEM certificate (CERTIFICATE block)")
        }
        for (index, block) in blocks.enumerated() {
            do {
                _ = try Certificate(pemEncoded: block)
            } catch {
                throw CredentialProblem("certificate \(index + 1) in \(path) is not a valid X.509 certificate")
            }
        }
    }
}
