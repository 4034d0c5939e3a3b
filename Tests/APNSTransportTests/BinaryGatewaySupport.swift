/// Helpers for the binary gateway and feedback service tests: frames, a raw TLS client on NIO
/// that writes bytes and collects what the server answers until it closes, and the same from
/// Python's `ssl` module, a peer this project did not write.
import APNSBinaryProtocol
import APNSModel
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import TestSupport

@testable import APNSSimulator

/// Whose client certificate a raw connection presents.
enum ClientIdentity {
    /// The simulator CA's client certificate.
    case simulator
    /// A certificate from an unrelated CA.
    case stranger
    case none

    var files: (cert: String, key: String)? {
        switch self {
        case .simulator: return (SimulatorTestEnvironment.credentials.clientCertificatePath, SimulatorTestEnvironment.credentials.clientKeyPath)
        case .stranger:
            return (SimulatorTestEnvironment.strangerCredentials.clientCertificatePath, SimulatorTestEnvironment.strangerCredentials.clientKeyPath)
        case .none: return nil
        }
    }
}

/// What one raw connection saw.
/// How long an exchange waits for the gateway's answer or close. Every exchange but the ones
/// that pass their own window ends with the gateway closing, so a long wait costs nothing when
/// things work, and a loaded machine (a TLS refusal took over 5 s once) cannot fake a silence.
let defaultReadWindow: Duration = .seconds(20)

struct RawExchange {
    var received: [UInt8]
    /// The server closed the connection (or the handshake failed) before the read window ended.
    var closedByServer: Bool

    /// The received bytes as an error response, if they are exactly one.
    var errorResponse: BinaryErrorResponse? {
        guard received.count == BinaryProtocol.errorResponseLength, case .response(let response) = BinaryErrorResponse.decode(received) else {
            return nil
        }
        return response
    }
}

enum BinaryFrames {
    static func token() -> [UInt8] { (0..<32).map { _ in UInt8.random(in: 0...255) } }

    /// A valid frame numbered `identifier`.
    static func valid(identifier: UInt32, token: [UInt8] = token(), payload: String = #"{"aps":{"alert":"hi"}}"#) -> [UInt8] {
        try! BinaryNotificationFrame(
            deviceToken: token, payload: Array(payload.utf8), identifier: identifier, expiration: 0, priority: 10
        ).encoded()
    }

    /// Valid frames numbered `identifiers`, concatenated, with their tokens.
    static func batch(_ identifiers: ClosedRange<UInt32>) -> (bytes: [UInt8], tokens: [UInt32: String]) {
        var bytes: [UInt8] = []
        var tokens: [UInt32: String] = [:]
        for identifier in identifiers {
            let token = token()
            tokens[identifier] = DeviceToken(bytes: token).hex
            bytes += valid(identifier: identifier, token: token)
        }
        return (bytes, tokens)
    }
}

enum RawTLSClient {
    /// Connects to 127.0.0.1:`port` with `identity`, writes `bytes`, then reads until the server
    /// closes or `readWindow` passes.
    static func exchange(
        port: Int, _ bytes: [UInt8], identity: ClientIdentity = .simulator, readWindow: Duration = defaultReadWindow
    ) async throws -> RawExchange {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(SimulatorTestEnvironment.credentials.caCertificatePath)
        tls.certificateVerification = .fullVerification
        if let files = identity.files {
            tls.certificateChain = try NIOSSLCertificate.fromPEMFile(files.cert).map { .certificate($0) }
            tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: files.key, format: .pem))
        }
        let context = try NIOSSLContext(configuration: tls)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    return try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            // A write can fail when the server already refused the handshake or closed.
            try? await outbound.write(ByteBuffer(bytes: bytes))
            return await withTaskGroup(of: RawExchange?.self) { group in
                group.addTask {
                    var received: [UInt8] = []
                    do {
                        for try await buffer in inbound { received += buffer.readableBytesView }
                    } catch {
                        // A refused handshake or an unclean close ends the stream too.
                    }
                    return RawExchange(received: received, closedByServer: true)
                }
                group.addTask {
                    try? await Task.sleep(for: readWindow)
                    return nil
                }
                let first = await group.next()!
                group.cancelAll()
                if let first { return first }
                return RawExchange(received: [], closedByServer: false)
            }
        }
    }
}

/// The same exchange from Python's `ssl` module.
enum PythonTLSClient {
    static func exchange(
        port: Int, _ bytes: [UInt8], identity: ClientIdentity = .simulator, readWindow: Double = defaultReadWindow.timeInterval
    ) async throws -> RawExchange {
        let files = identity.files
        let arguments = [
            "-c", script, String(port), SimulatorTestEnvironment.credentials.caCertificatePath, files?.cert ?? "", files?.key ?? "",
            bytes.map { String(format: "%02x", $0) }.joined(), String(readWindow),
        ]
        let result = try await runProcess("/usr/bin/python3", arguments)
        guard result.status == 0 else { throw TestSupportError("python ssl client failed (\(result.status)): \(result.stderr)") }
        let parts = result.stdout.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",", omittingEmptySubsequences: false)
        guard parts.count == 2 else { throw TestSupportError("unexpected python output: \(result.stdout)") }
        let hex = Array(parts[1].utf8)
        let received = stride(from: 0, to: hex.count, by: 2).map {
            DeviceToken.hexDigitValue(hex[$0])! << 4 | DeviceToken.hexDigitValue(hex[$0 + 1])!
        }
        return RawExchange(received: received, closedByServer: parts[0] == "closed")
    }

    static let script = #"""
        import socket, ssl, sys, time
        port, ca, cert, key, data, window = sys.argv[1:7]
        ctx = ssl.create_default_context(cafile=ca)
        if cert:
            ctx.load_cert_chain(cert, key)
        raw = socket.create_connection(("127.0.0.1", int(port)), timeout=float(window))
        received = b""
        state = "open"
        try:
            tls = ctx.wrap_socket(raw, server_hostname="localhost")
            tls.sendall(bytes.fromhex(data))
            deadline = time.time() + float(window)
            while time.time() < deadline:
                chunk = tls.recv(65536)
                if not chunk:
                    state = "closed"
                    break
                received += chunk
        except socket.timeout:
            pass
        except (ssl.SSLError, ConnectionError):
            state = "closed"
        print(state + "," + received.hex())
        """#
}
