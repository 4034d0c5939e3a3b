/// Helpers for the configuration tests: temporary directories, generated credentials, and
/// loading a configuration text from a real file so errors carry a real path.
import APNSConfig
import Crypto
import Foundation
import SwiftASN1
import Testing
import X509

/// A fresh directory under the system temp dir, removed when the value is released.
final class TempDirectory: Sendable {
    let url: URL
    var path: String { url.path }

    init() throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("apns-config-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    @discardableResult
    func write(_ name: String, _ text: String) throws -> String {
        try write(name, Data(text.utf8))
    }

    @discardableResult
    func write(_ name: String, _ data: Data) throws -> String {
        let file = url.appendingPathComponent(name)
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try data.write(to: file)
        return file.path
    }
}

/// Credentials made inside the test: an APNs-style P-256 .p8 key, a self-signed client
/// certificate with its key, and an unrelated key that matches nothing.
struct TestCredentials {
    let p8: String
    let certificatePEM: String
    let certificateKeyPEM: String
    let otherKeyPEM: String
    let p384KeyPEM: String
    let certificateDER: Data

    init() throws {
        p8 = P256.Signing.PrivateKey().pemRepresentation
        let clientKey = P256.Signing.PrivateKey()
        let privateKey = Certificate.PrivateKey(clientKey)
        let name = try DistinguishedName { CommonName("apns-worker config test") }
        let now = Date()
        let certificate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: privateKey.publicKey,
            notValidBefore: now.addingTimeInterval(-60), notValidAfter: now.addingTimeInterval(3600),
            issuer: name, subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: Certificate.Extensions {}, issuerPrivateKey: privateKey)
        certificatePEM = try certificate.serializeAsPEM().pemString
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        certificateDER = Data(serializer.serializedBytes)
        certificateKeyPEM = clientKey.pemRepresentation
        otherKeyPEM = P256.Signing.PrivateKey().pemRepresentation
        p384KeyPEM = P384.Signing.PrivateKey().pemRepresentation
    }

    /// The files the simulator generates, under `directory`.
    func writeSimulatorSet(to directory: TempDirectory, under folder: String) throws {
        try directory.write("\(folder)/AuthKey_KEY1234567.p8", p8)
        try directory.write("\(folder)/ca.pem", certificatePEM)
        try directory.write("\(folder)/client.pem", certificatePEM)
        try directory.write("\(folder)/client.key", certificateKeyPEM)
    }
}

/// The smallest valid file; tests append sections to it. Lines: 1 [amqp], 2 url, 3 blank,
/// 4 [apns …], 5 teamId, 6 keyId, 7 tokenKeyFile.
let minimalConfig = """
    [amqp]
    url = amqp://guest:guest@127.0.0.1:5672/%2f

    [apns "com.example.app"]
    teamId = TEAM123456
    keyId = KEY1234567
    tokenKeyFile = AuthKey_KEY1234567.p8
    """

/// Writes `text` as `name` in `directory` and loads it.
func loadConfig(
    _ text: String, in directory: TempDirectory, name: String = "test.conf", environment: [String: String] = [:],
    credentials: ConfigurationLoader.CredentialValidation = .skipFiles
) throws -> WorkerConfiguration {
    let path = try directory.write(name, text)
    return try ConfigurationLoader.load(path: path, environment: environment, credentials: credentials)
}

/// The error loading `text` raises; records a test failure when it loads.
func loadError(
    _ text: String, in directory: TempDirectory, environment: [String: String] = [:],
    credentials: ConfigurationLoader.CredentialValidation = .skipFiles,
    sourceLocation: SourceLocation = #_sourceLocation
) throws -> ConfigurationError? {
    do {
        _ = try loadConfig(text, in: directory, environment: environment, credentials: credentials)
        Issue.record("expected a configuration error", sourceLocation: sourceLocation)
        return nil
    } catch let error as ConfigurationError {
        return error
    }
}

/// The repository root, found from this file's path.
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent()
