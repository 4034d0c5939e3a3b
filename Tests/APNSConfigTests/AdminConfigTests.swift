import APNSConfig
import Foundation
import Testing

/// `[admin]` keys of the access model: `allowedHosts`, and `certFile`/`keyFile` for an HTTPS admin,
/// validated like every other key (one line naming file, line and key).
@Suite("admin configuration")
struct AdminConfigTests {
    @Test func allowedHostsAndTLSFiles() throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        try directory.write("tls/admin.pem", credentials.certificatePEM)
        try directory.write("tls/admin.key", credentials.certificateKeyPEM)
        try directory.write("AuthKey_KEY1234567.p8", credentials.p8)
        let text = minimalConfig + "\n[admin]\nallowedHosts = ops.internal, Admin.Example.\ncertFile = tls/admin.pem\nkeyFile = tls/admin.key"
        let configuration = try loadConfig(text, in: directory, credentials: .verifyFiles)
        #expect(configuration.admin.allowedHosts == ["ops.internal", "Admin.Example."])
        #expect(configuration.admin.certFile == "\(directory.path)/tls/admin.pem")
        #expect(configuration.admin.keyFile == "\(directory.path)/tls/admin.key")
        #expect(configuration.admin.usesTLS)
        #expect(try loadConfig(minimalConfig, in: directory).admin.usesTLS == false)
    }

    @Test func certFileWithoutKeyFileNamesFileLineAndKey() throws {
        let directory = try TempDirectory()
        let text = minimalConfig + "\n[admin]\ncertFile = admin.pem"
        let error = try #require(try loadError(text, in: directory))
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:9: [admin] keyFile: required with certFile"), "\(error)")
        #expect(!error.description.contains("\n"))
    }

    @Test func aKeyThatIsNotTheCertificatesIsRefused() throws {
        let directory = try TempDirectory()
        let credentials = try TestCredentials()
        try directory.write("admin.pem", credentials.certificatePEM)
        try directory.write("admin.key", credentials.otherKeyPEM)
        try directory.write("AuthKey_KEY1234567.p8", credentials.p8)
        let text = minimalConfig + "\n[admin]\ncertFile = admin.pem\nkeyFile = admin.key"
        let error = try #require(try loadError(text, in: directory, credentials: .verifyFiles))
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:10: [admin] keyFile: "), "\(error)")
        #expect(error.description.contains("does not match the certificate in certFile (line 9)"))
    }

    @Test func aHostListWithJunkIsRefused() throws {
        let directory = try TempDirectory()
        let error = try #require(try loadError(minimalConfig + "\n[admin]\nallowedHosts = ok.example, evil/path", in: directory))
        #expect(error.description.hasPrefix("\(directory.path)/test.conf:9: [admin] allowedHosts: "), "\(error)")
    }
}
