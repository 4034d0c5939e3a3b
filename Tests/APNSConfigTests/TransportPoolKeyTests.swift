import APNSConfig
import APNSModel
import Foundation
import Testing

/// Which bundles share a connection pool: the key's rules, on file contents given
/// in memory.
@Suite struct TransportPoolKeyTests {
    static let files: [String: [UInt8]] = [
        "a.p8": Array("key A".utf8), "a-copy.p8": Array("key A".utf8), "b.p8": Array("key B".utf8),
        "cert1.pem": Array("cert 1".utf8), "key1.pem": Array("key 1".utf8), "cert2.pem": Array("cert 2".utf8),
        "ca1.pem": Array("ca 1".utf8), "ca2.pem": Array("ca 2".utf8),
    ]

    static func key(_ bundle: BundleConfiguration, _ environment: APNSEnvironment = .production) throws -> TransportPoolKey {
        try TransportPoolKey(bundle: bundle, environment: environment) { path in
            guard let bytes = files[path] else { throw Missing(path: path) }
            return bytes
        }
    }

    struct Missing: Error { var path: String }

    static func token(_ id: String, team: String = "TEAM1", key: String = "KEY1", file: String = "a.p8", host: String? = nil, caFile: String? = nil)
        -> BundleConfiguration
    {
        BundleConfiguration(bundleID: id, auth: .token(teamID: team, keyID: key, tokenKeyFile: file), host: host, caFile: caFile)
    }

    @Test func bundlesOfOneTeamKeyShareAPoolPerEnvironment() throws {
        let a = try Self.key(Self.token("com.a"))
        #expect(a == (try Self.key(Self.token("com.b"))))
        // The same bytes under another file name are the same key.
        #expect(a == (try Self.key(Self.token("com.c", file: "a-copy.p8"))))
        #expect(a != (try Self.key(Self.token("com.a"), .sandbox)))
        #expect(a.description.hasPrefix("token TEAM1/KEY1#"))
        #expect(a.description.hasSuffix(" production api.push.apple.com:443"))
    }

    @Test func anotherTeamKeyIdKeyBytesEndpointOrTrustIsAnotherPool() throws {
        let a = try Self.key(Self.token("com.a"))
        #expect(a != (try Self.key(Self.token("com.a", team: "TEAM2"))))
        #expect(a != (try Self.key(Self.token("com.a", key: "KEY2"))))
        // A rotated key under the same key ID: new connections and a new token.
        #expect(a != (try Self.key(Self.token("com.a", file: "b.p8"))))
        #expect(a != (try Self.key(Self.token("com.a", host: "127.0.0.1"))))
        #expect(a != (try Self.key(Self.token("com.a", caFile: "ca1.pem"))))
        #expect((try Self.key(Self.token("com.a", caFile: "ca1.pem"))) != (try Self.key(Self.token("com.a", caFile: "ca2.pem"))))
    }

    @Test func certificateBundlesShareWhenCertificateAndKeyAreTheSame() throws {
        func cert(_ id: String, _ certFile: String, _ keyFile: String = "key1.pem") -> BundleConfiguration {
            BundleConfiguration(bundleID: id, auth: .certificate(certFile: certFile, keyFile: keyFile))
        }
        let a = try Self.key(cert("com.a", "cert1.pem"))
        #expect(a == (try Self.key(cert("com.b", "cert1.pem"))))
        #expect(a != (try Self.key(cert("com.a", "cert2.pem"))))
        // A key file holding the certificate's bytes and the other way round is not the same pair.
        #expect((try Self.key(cert("com.a", "cert1.pem", "cert2.pem"))) != (try Self.key(cert("com.a", "cert2.pem", "cert1.pem"))))
        #expect(a.description.hasPrefix("certificate #"))
    }

    @Test func binaryBundlesNeverShareEvenWithOneCertificate() throws {
        func binary(_ id: String) -> BundleConfiguration {
            BundleConfiguration(bundleID: id, transport: .binary, auth: .certificate(certFile: "cert1.pem", keyFile: "key1.pem"))
        }
        let a = try Self.key(binary("com.a"))
        #expect(a != (try Self.key(binary("com.b"))))
        #expect(a == (try Self.key(binary("com.a"))))
        #expect(a.description.hasPrefix("binary com.a#"))
    }

    @Test func theKeyNamesNoKeyMaterial() throws {
        let key = try Self.key(Self.token("com.a"))
        #expect(!key.description.contains("key A"))
        guard case .token(_, _, let digest) = key.credential else { Issue.record("not a token key"); return }
        #expect(digest.count == 64)
        #expect(!key.description.contains(digest), "only a prefix of the digest is shown")
    }

    /// A file larger than the limit is read up to it, then refused; a path naming something
    /// endless (a device) is not read at all.
    @Test func aFileLargerThanTheLimitIsRefusedNotReadWhole() throws {
        let directory = try TempDirectory()
        let large = try directory.write("large.p8", Data())
        #expect(truncate(large, off_t(TransportPoolKey.fileLimit + 1)) == 0)
        for (path, why) in [(large, "is larger than \(TransportPoolKey.fileLimit / 1024) KiB"), ("/dev/zero", "is a device, not a regular file")] {
            do {
                _ = try TransportPoolKey.reading(bundle: Self.token("com.a", file: path), environment: .production)
                Issue.record("\(path) was read as a key")
            } catch {
                #expect("\(error)" == "[apns \"com.a\"] cannot read \(path): it \(why)")
            }
        }
    }

    @Test func anUnreadableFileNamesTheBundleAndThePath() throws {
        let bundle = Self.token("com.a", file: "/nonexistent/AuthKey.p8")
        #expect(throws: TransportPoolKey.UnreadableFile.self) { try TransportPoolKey.reading(bundle: bundle, environment: .production) }
        do {
            _ = try TransportPoolKey.reading(bundle: bundle, environment: .production)
        } catch {
            #expect("\(error)".hasPrefix("[apns \"com.a\"] cannot read /nonexistent/AuthKey.p8: "))
        }
    }
}
