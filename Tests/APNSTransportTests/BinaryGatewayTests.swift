/// The simulator's binary gateway and feedback service against real TLS peers (a raw NIO client
/// and Python's `ssl`): Apple's status codes, the error-then-close rule with later frames
/// discarded, the injected faults, the client certificate check, and the feedback service read
/// by `BinaryFeedbackClient`.
import APNSBinaryProtocol
import APNSModel
import APNSTransport
import Foundation
import Logging
import TestSupport
import Testing

@testable import APNSSimulator

private typealias Env = SimulatorTestEnvironment

private func withGateway<T>(_ body: (APNSSimulator) async throws -> T) async throws -> T {
    try await Env.withSimulator({
        $0.binaryPort = 0
        $0.feedbackPort = 0
    }, body)
}

/// A malformed frame and the status Apple answers it with.
struct MalformedFrameCase: CustomTestStringConvertible, Sendable {
    var name: String
    var bytes: [UInt8]
    var status: BinaryStatus
    var identifier: UInt32
    var testDescription: String { "\(name) → \(status)" }

    static func frame(_ name: String, token: [UInt8], payload: [UInt8], status: BinaryStatus, priority: UInt8 = 10) -> MalformedFrameCase {
        let bytes = try! BinaryNotificationFrame(deviceToken: token, payload: payload, identifier: 77, expiration: 0, priority: priority).encoded()
        return MalformedFrameCase(name: name, bytes: bytes, status: status, identifier: 77)
    }

    static let all: [MalformedFrameCase] = {
        let token = BinaryFrames.token()
        let payload = Array(#"{"aps":{}}"#.utf8)
        // Frames with an item left out: built by hand, the encoder always writes token and payload.
        let identifierItem: [UInt8] = [3, 0, 4, 0, 0, 0, 77]
        let tokenItem: [UInt8] = [1, 0, 32] + token
        let payloadItem: [UInt8] = [2, 0, UInt8(payload.count)] + payload
        func framed(_ items: [UInt8]) -> [UInt8] {
            [2] + withUnsafeBytes(of: UInt32(items.count).bigEndian, Array.init) + items
        }
        return [
            MalformedFrameCase(name: "no token item", bytes: framed(identifierItem + payloadItem), status: .missingDeviceToken, identifier: 77),
            MalformedFrameCase(name: "no payload item", bytes: framed(identifierItem + tokenItem), status: .missingPayload, identifier: 77),
            .frame("31-byte token", token: Array(token.prefix(31)), payload: payload, status: .invalidTokenSize),
            .frame("empty payload", token: token, payload: [], status: .missingPayload),
            .frame("2049-byte payload", token: token, payload: Array(repeating: 0x20, count: 2049), status: .invalidPayloadSize),
            .frame("priority 7", token: token, payload: payload, status: .protocolError, priority: 7),
            MalformedFrameCase(
                name: "unknown item 9", bytes: framed(identifierItem + tokenItem + payloadItem + [9, 0, 1, 0]), status: .protocolError,
                identifier: 77),
            MalformedFrameCase(
                name: "duplicate token item", bytes: framed(identifierItem + tokenItem + tokenItem + payloadItem), status: .protocolError,
                identifier: 77),
            MalformedFrameCase(name: "legacy command 1", bytes: [1, 0, 0, 0, 77] + Array(repeating: 0, count: 40), status: .protocolError, identifier: 0),
            MalformedFrameCase(name: "garbage", bytes: Array("GET / HTTP/1.1\r\n\r\n".utf8), status: .protocolError, identifier: 0),
        ]
    }()
}

@Suite("Binary gateway", .serialized)
struct BinaryGatewayTests {
    @Test("a valid frame is accepted silently and recorded with its identifier and the certificate's topic")
    func acceptsFrame() async throws {
        try await withGateway { simulator in
            let token = BinaryFrames.token()
            let frame = try BinaryNotificationFrame(
                deviceToken: token, payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8), identifier: 42, expiration: 1_900_000_000, priority: 5
            ).encoded()
            let exchange = try await RawTLSClient.exchange(port: try #require(simulator.binaryPort), frame, readWindow: .seconds(2))
            #expect(exchange.received.isEmpty)
            #expect(!exchange.closedByServer)
            try await waitUntil("the gateway records the frame") { simulator.counters().binaryAccepted == 1 }
            let record = try #require(simulator.accepted().first)
            #expect(record.transport == .binary)
            #expect(record.binaryIdentifier == 42)
            #expect(record.token == DeviceToken(bytes: token).hex)
            #expect(record.topic == Env.bundle)
            #expect(record.priority == 5)
            #expect(record.expiration == 1_900_000_000)
            #expect(record.authentication == .certificate)
            #expect(String(decoding: record.payload, as: UTF8.self) == #"{"aps":{"alert":"hi"}}"#)
            let counters = simulator.counters()
            #expect(counters.binaryReceived == 1)
            #expect(counters.binaryAccepted == 1)
            #expect(counters.binaryConnections == 1)
            #expect(counters.accepted == 0)
        }
    }

    @Test("a malformed frame gets Apple's status naming it, then the connection closes", arguments: MalformedFrameCase.all)
    func malformedFrames(_ malformed: MalformedFrameCase) async throws {
        try await withGateway { simulator in
            let exchange = try await RawTLSClient.exchange(port: try #require(simulator.binaryPort), malformed.bytes)
            #expect(exchange.errorResponse == BinaryErrorResponse(status: malformed.status, identifier: malformed.identifier))
            #expect(exchange.closedByServer)
            #expect(simulator.accepted().isEmpty)
            #expect(simulator.counters().count(malformed.status) == 1)
        }
    }

    @Test("a scripted token gets its status; HTTP/2 outcomes map to binary ones (Unregistered → 8)")
    func scriptedStatuses() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.binaryPort)
            for (outcome, status) in [
                (ScriptedOutcome.binaryStatus(8), BinaryStatus.invalidToken), (.binaryStatus(1), .processingError),
                (.binaryStatus(255), .unknown), (.unregistered(timestamp: 1), .invalidToken), (.badDeviceToken, .invalidToken),
                (.always(status: 503, reason: .serviceUnavailable), .processingError),
            ] {
                let token = BinaryFrames.token()
                simulator.script(token: DeviceToken(bytes: token).hex, outcome)
                let exchange = try await RawTLSClient.exchange(port: port, BinaryFrames.valid(identifier: 9, token: token))
                #expect(exchange.errorResponse == BinaryErrorResponse(status: status, identifier: 9), "\(outcome)")
                #expect(exchange.closedByServer)
            }
            #expect(simulator.accepted().isEmpty)
        }
    }

    @Test("an error closes the connection and discards every later frame: 5 frames, the 2nd bad → only the 1st accepted")
    func errorDiscardsLaterFrames() async throws {
        try await withGateway { simulator in
            let (bytes, tokens) = BinaryFrames.batch(1...5)
            simulator.script(token: tokens[2]!, .binaryStatus(8))
            let exchange = try await RawTLSClient.exchange(port: try #require(simulator.binaryPort), bytes)
            #expect(exchange.errorResponse == BinaryErrorResponse(status: .invalidToken, identifier: 2))
            #expect(exchange.closedByServer)
            #expect(simulator.accepted().map(\.binaryIdentifier) == [1])
            #expect(simulator.counters().binaryReceived == 2)
        }
    }

    @Test("a long pipeline with an early bad frame: the error response still arrives while the client is writing")
    func errorDuringLongPipeline() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.binaryPort)
            for round in 0..<5 {
                let (bytes, tokens) = BinaryFrames.batch(1...3000)
                simulator.script(token: tokens[10]!, .binaryStatus(8))
                simulator.clearAccepted()
                let exchange = try await RawTLSClient.exchange(port: port, bytes)
                #expect(exchange.errorResponse == BinaryErrorResponse(status: .invalidToken, identifier: 10), "round \(round)")
                #expect(exchange.closedByServer)
                #expect(simulator.accepted().compactMap(\.binaryIdentifier) == Array(1...9), "round \(round)")
            }
        }
    }

    @Test("a frame written after the error response is not processed")
    func frameAfterErrorIgnored() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.binaryPort)
            let token = BinaryFrames.token()
            simulator.script(token: DeviceToken(bytes: token).hex, .binaryStatus(8))
            // Python: send the bad frame, read the error, then try another frame on the same socket.
            let result = try await runPython(port: port, first: BinaryFrames.valid(identifier: 1, token: token), second: BinaryFrames.valid(identifier: 2))
            #expect(result.hasPrefix("080800000001"))
            #expect(simulator.accepted().isEmpty)
            #expect(simulator.counters().binaryReceived == 1)
        }
    }

    @Test("binaryShutdownAfterFrames: the N-th frame is accepted, status 10 names it, later frames are discarded")
    func shutdownAfterFrames() async throws {
        try await withGateway { simulator in
            simulator.setFaults(SimulatorFaults(binaryShutdownAfterFrames: 3))
            let exchange = try await RawTLSClient.exchange(port: try #require(simulator.binaryPort), BinaryFrames.batch(1...5).bytes)
            #expect(exchange.errorResponse == BinaryErrorResponse(status: .shutdown, identifier: 3))
            #expect(exchange.closedByServer)
            #expect(simulator.accepted().map(\.binaryIdentifier) == [1, 2, 3])
            #expect(simulator.counters().count(BinaryStatus.shutdown) == 1)
        }
    }

    @Test("binaryCloseSilentlyAfterFrames: N frames accepted, then a close with no error response")
    func silentClose() async throws {
        try await withGateway { simulator in
            simulator.setFaults(SimulatorFaults(binaryCloseSilentlyAfterFrames: 2))
            let exchange = try await RawTLSClient.exchange(port: try #require(simulator.binaryPort), BinaryFrames.batch(1...4).bytes)
            #expect(exchange.received.isEmpty)
            #expect(exchange.closedByServer)
            #expect(simulator.accepted().map(\.binaryIdentifier) == [1, 2])
            #expect(simulator.counters().binarySilentCloses == 1)
        }
    }

    @Test("binaryStatusAtFrame counts frames over connections: first, middle, two in a row; a resending client sees each once")
    func statusAtFramePositions() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.binaryPort)
            simulator.setFaults(SimulatorFaults(binaryStatusAtFrame: [1: 8, 4: 8, 5: 8]))
            // Resend everything after the failed frame on a new connection, as the transport does.
            // The read window is the "no error came" signal: generous, so load cannot fake it.
            var next: UInt32 = 1
            var failed: [UInt32] = []
            while next <= 6 {
                let exchange = try await RawTLSClient.exchange(port: port, BinaryFrames.batch(next...6).bytes, readWindow: .seconds(10))
                guard let response = exchange.errorResponse else { break }
                #expect(response.status == .invalidToken)
                failed.append(response.identifier)
                next = response.identifier + 1
            }
            #expect(failed == [1, 4, 5])
            #expect(simulator.accepted().map(\.binaryIdentifier) == [2, 3, 6])
        }
    }

    @Test("TLS without a client certificate, or with one from another CA, is refused before any frame is read")
    func clientCertificateRequired() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.binaryPort)
            for identity in [ClientIdentity.none, .stranger] {
                let nio = try await RawTLSClient.exchange(port: port, BinaryFrames.valid(identifier: 1), identity: identity)
                #expect(nio.received.isEmpty)
                #expect(nio.closedByServer)
                let python = try await PythonTLSClient.exchange(port: port, BinaryFrames.valid(identifier: 1), identity: identity)
                #expect(python.received.isEmpty)
                #expect(python.closedByServer)
            }
            #expect(simulator.accepted().isEmpty)
            #expect(simulator.counters().binaryReceived == 0)
        }
    }

    @Test("Python's ssl module: accepted frames, then a bad one answered and the rest discarded")
    func pythonPeer() async throws {
        try await withGateway { simulator in
            let (bytes, tokens) = BinaryFrames.batch(1...4)
            simulator.script(token: tokens[3]!, .binaryStatus(8))
            let exchange = try await PythonTLSClient.exchange(port: try #require(simulator.binaryPort), bytes)
            #expect(exchange.errorResponse == BinaryErrorResponse(status: .invalidToken, identifier: 3))
            #expect(exchange.closedByServer)
            #expect(simulator.accepted().map(\.binaryIdentifier) == [1, 2])
        }
    }

    @Test("a gateway without a client CA cannot start")
    func needsClientCA() async throws {
        var configuration = Env.configuration { $0.binaryPort = 0 }
        configuration.tls.clientCAPEM = nil
        await #expect(throws: SimulatorConfigurationError.self) {
            _ = try await APNSSimulator.start(configuration, logger: Env.logger)
        }
    }

    /// Sends `first`, reads one error response, sends `second`, and prints the hex of everything
    /// received.
    private func runPython(port: Int, first: [UInt8], second: [UInt8]) async throws -> String {
        let script = #"""
            import socket, ssl, sys
            port, ca, cert, key, first, second = sys.argv[1:7]
            ctx = ssl.create_default_context(cafile=ca)
            ctx.load_cert_chain(cert, key)
            tls = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(port)), timeout=20), server_hostname="localhost")
            tls.sendall(bytes.fromhex(first))
            received = b""
            while len(received) < 6:
                chunk = tls.recv(6 - len(received))
                if not chunk:
                    break
                received += chunk
            try:
                tls.sendall(bytes.fromhex(second))
                while True:
                    chunk = tls.recv(65536)
                    if not chunk:
                        break
                    received += chunk
            except (ssl.SSLError, ConnectionError, socket.timeout):
                pass
            print(received.hex())
            """#
        let credentials = Env.credentials
        let hex = { (bytes: [UInt8]) in bytes.map { String(format: "%02x", $0) }.joined() }
        let result = try await runProcess(
            "/usr/bin/python3",
            ["-c", script, String(port), credentials.caCertificatePath, credentials.clientCertificatePath, credentials.clientKeyPath, hex(first), hex(second)])
        #expect(result.status == 0, "\(result.stderr)")
        return result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

@Suite("Feedback service", .serialized)
struct FeedbackServiceTests {
    private func client(port: Int, identity: ClientIdentity = .simulator) throws -> BinaryFeedbackClient {
        let files = try #require(identity.files)
        return try BinaryFeedbackClient(
            configuration: .init(
                host: "127.0.0.1", port: port, certFile: files.cert, keyFile: files.key, caFile: Env.credentials.caCertificatePath,
                timeout: .seconds(10)),
            logger: Env.logger)
    }

    @Test("BinaryFeedbackClient reads every queued tuple in order; served tuples are gone")
    func servesAndForgets() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.feedbackPort)
            let tokens = (0..<3).map { _ in BinaryFrames.token() }
            for (index, token) in tokens.enumerated() {
                simulator.addFeedback(token: DeviceToken(bytes: token).hex.uppercased(), timestamp: 1_700_000_000 + UInt32(index))
            }
            let client = try client(port: port)
            let tuples = try await client.fetch()
            #expect(tuples == tokens.enumerated().map { FeedbackTuple(timestamp: 1_700_000_000 + UInt32($0.offset), deviceToken: $0.element) })
            #expect(simulator.pendingFeedback().isEmpty)
            #expect(try await client.fetch().isEmpty)
            let counters = simulator.counters()
            #expect(counters.feedbackConnections == 2)
            #expect(counters.feedbackTuplesServed == 3)
        }
    }

    @Test("the feedback service refuses a client certificate from another CA and keeps the tuples")
    func refusesStranger() async throws {
        try await withGateway { simulator in
            let port = try #require(simulator.feedbackPort)
            simulator.addFeedback(token: Env.deviceToken(), timestamp: 1)
            await #expect(throws: (any Error).self) { _ = try await client(port: port, identity: .stranger).fetch() }
            let python = try await PythonTLSClient.exchange(port: port, [], identity: .none)
            #expect(python.received.isEmpty)
            #expect(simulator.pendingFeedback().count == 1)
            // Python's ssl with the right certificate reads the raw tuple.
            let raw = try await PythonTLSClient.exchange(port: port, [])
            #expect(raw.closedByServer)
            #expect(raw.received.count == FeedbackTuple.headerLength + 32)
            #expect(Array(raw.received.prefix(6)) == [0, 0, 0, 1, 0, 32])
        }
    }
}
