/// Helpers for the simulator's tests: credentials, a running simulator per test, and two HTTP/2
/// clients this project did not write: Debian's curl and Python's `h2` library.
import Foundation
import Logging
import NIOCore
import NIOPosix
import TestSupport

@testable import APNSSimulator

enum SimulatorTestEnvironment {
    static let teamID = "TEAM123456"
    static let keyID = "KEY1234567"
    static let bundle = "com.example.app"
    static let legacyBundle = "com.example.legacy"

    /// One set of credentials for the whole test run; a second, unrelated set for "wrong key" tests.
    static let credentials: GeneratedCredentials = {
        let directory = NSTemporaryDirectory() + "apnsw-simulator-tests-\(UUID().uuidString.prefix(8))"
        return try! SimulatorCredentials.generate(into: directory, teamID: teamID, keyID: keyID)
    }()

    static let strangerCredentials: GeneratedCredentials = {
        let directory = NSTemporaryDirectory() + "apnsw-simulator-tests-\(UUID().uuidString.prefix(8))"
        return try! SimulatorCredentials.generate(into: directory, teamID: teamID, keyID: keyID)
    }()

    static var logger: Logger {
        var logger = Logger(label: "simulator-tests")
        logger.logLevel = .warning
        return logger
    }

    static func configuration(_ adjust: (inout SimulatorConfiguration) -> Void = { _ in }) -> SimulatorConfiguration {
        var configuration = SimulatorConfiguration(
            tls: credentials.tlsConfiguration(), bundleIDs: [bundle, legacyBundle], tokenKeys: [credentials.tokenKey])
        adjust(&configuration)
        return configuration
    }

    /// Runs `body` with an event-loop thread of its own for one test's simulator (and client),
    /// shut down afterwards. On NIO's shared group, another suite's backlog in this process could
    /// delay this test's answers past its deadlines on a loaded machine.
    static func withOwnEventLoop<T>(_ body: (MultiThreadedEventLoopGroup) async throws -> T) async throws -> T {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let result = try await body(group)
            try? await group.shutdownGracefully()
            return result
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// Starts a simulator on a thread of its own, runs `body`, shuts it down.
    static func withSimulator<T>(
        _ adjust: (inout SimulatorConfiguration) -> Void = { _ in },
        _ body: (APNSSimulator) async throws -> T
    ) async throws -> T {
        try await withOwnEventLoop { group in
            let simulator = try await APNSSimulator.start(configuration(adjust), logger: logger, eventLoopGroup: group)
            do {
                let result = try await body(simulator)
                try await simulator.shutdown()
                return result
            } catch {
                try? await simulator.shutdown()
                throw error
            }
        }
    }

    static func token() throws -> String { try credentials.providerToken() }

    /// A random 32-byte device token in hex.
    static func deviceToken() -> String {
        (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}

/// One answer as curl saw it.
struct CurlAnswer {
    var httpVersion: String
    var status: Int
    var headers: [String: String]
    var body: String

    var reason: String? {
        guard let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return nil
        }
        return object["reason"] as? String
    }

    var timestamp: Int64? {
        guard let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return nil
        }
        return (object["timestamp"] as? NSNumber)?.int64Value
    }
}

enum Curl {
    /// `curl --http2` against the simulator with its CA; `headers` are `name: value` lines.
    static func send(
        port: Int, path: String, method: String = "POST", headers: [String], body: String?,
        clientCertificate: Bool = false, host: String = "localhost"
    ) async throws -> CurlAnswer {
        let credentials = SimulatorTestEnvironment.credentials
        var arguments = [
            "--http2", "-sS", "-i", "--max-time", "30", "--cacert", credentials.caCertificatePath,
            "-X", method, "https://\(host):\(port)\(path)",
        ]
        for header in headers { arguments += ["-H", header] }
        if let body { arguments += ["--data-binary", body] }
        if clientCertificate { arguments += ["--cert", credentials.clientCertificatePath, "--key", credentials.clientKeyPath] }
        let result = try await runProcess("/usr/bin/curl", arguments)
        guard result.status == 0 else { throw TestSupportError("curl failed (\(result.status)): \(result.stderr)") }
        return try parse(result.stdout)
    }

    static func parse(_ output: String) throws -> CurlAnswer {
        guard let split = output.range(of: "\r\n\r\n") else { throw TestSupportError("no header end in curl output: \(output)") }
        let head = output[..<split.lowerBound].components(separatedBy: "\r\n")
        let statusParts = head[0].split(separator: " ")
        guard statusParts.count >= 2, let status = Int(statusParts[1]) else { throw TestSupportError("bad status line: \(head[0])") }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return CurlAnswer(
            httpVersion: String(statusParts[0]), status: status, headers: headers, body: String(output[split.upperBound...]))
    }
}

/// A request for the Python h2 client.
struct H2Request: Encodable {
    var path: String
    var method: String = "POST"
    var headers: [[String]]
    var body: String = ""
}

/// One connection of the Python h2 client and what it observed.
struct H2Connection: Encodable {
    var requests: [H2Request]
    /// Wait for each answer before sending the next request; else send all at once.
    var sequential: Bool = false
    var clientCertificate: Bool = false
}

struct H2Result: Decodable {
    struct Response: Decodable {
        var status: Int?
        var headers: [String: String]
        var body: String
        var reset: Int?
        var reason: String? {
            guard let data = body.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                return nil
            }
            return object["reason"] as? String
        }
    }
    struct GoAway: Decodable {
        var lastStreamID: Int
        var errorCode: Int
        var debugData: String
    }
    var alpn: String?
    /// SETTINGS_MAX_CONCURRENT_STREAMS values the server advertised, in order.
    var maxConcurrentStreams: [Int]
    /// By stream ID; a stream with neither status nor reset was never answered.
    var responses: [String: Response]
    var streamIDs: [Int]
    var goaway: GoAway?
    var closed: Bool
    /// Frames arrived after the GOAWAY (h2 stops reading there).
    var framesAfterGoaway: Bool

    func response(_ index: Int) -> Response? { responses[String(streamIDs[index])] }
}

enum PythonH2 {
    /// Debian's python3 with python3-h2 (not whatever python3 is first on PATH).
    static let python = "/usr/bin/python3"

    /// Runs the client over one connection per element and returns what each saw.
    static func run(port: Int, _ connections: [H2Connection], timeout: Double = 20) async throws -> [H2Result] {
        struct Spec: Encodable {
            var port: Int
            var ca: String
            var cert: String
            var key: String
            var timeout: Double
            var connections: [H2Connection]
        }
        let credentials = SimulatorTestEnvironment.credentials
        let spec = Spec(
            port: port, ca: credentials.caCertificatePath, cert: credentials.clientCertificatePath,
            key: credentials.clientKeyPath, timeout: timeout, connections: connections)
        let json = String(decoding: try JSONEncoder().encode(spec), as: UTF8.self)
        let result = try await runProcess(python, ["-c", script, json])
        guard result.status == 0 else { throw TestSupportError("h2 client failed (\(result.status)): \(result.stderr)") }
        return try JSONDecoder().decode([H2Result].self, from: Data(result.stdout.utf8))
    }

    static let script = #"""
        import json, socket, ssl, sys, time
        import h2.config, h2.connection, h2.events, h2.exceptions, h2.settings

        spec = json.loads(sys.argv[1])

        def run(connection):
            ctx = ssl.create_default_context(cafile=spec["ca"])
            ctx.set_alpn_protocols(["h2"])
            if connection.get("clientCertificate"):
                ctx.load_cert_chain(spec["cert"], spec["key"])
            raw = socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec["timeout"])
            tls = ctx.wrap_socket(raw, server_hostname="localhost")
            conn = h2.connection.H2Connection(config=h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.initiate_connection()
            tls.sendall(conn.data_to_send())
            out = {"alpn": tls.selected_alpn_protocol(), "maxConcurrentStreams": [], "responses": {},
                   "streamIDs": [], "goaway": None, "closed": False, "framesAfterGoaway": False}
            done = set()
            deadline = time.time() + spec["timeout"]

            def pump():
                data = tls.recv(65536)
                if not data:
                    out["closed"] = True
                    return False
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RemoteSettingsChanged):
                        changed = event.changed_settings.get(h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS)
                        if changed is not None:
                            out["maxConcurrentStreams"].append(changed.new_value)
                    elif isinstance(event, h2.events.ResponseReceived):
                        r = out["responses"].setdefault(str(event.stream_id), {"headers": {}, "body": ""})
                        for name, value in event.headers:
                            if name == ":status":
                                r["status"] = int(value)
                            else:
                                r["headers"][name] = value
                    elif isinstance(event, h2.events.DataReceived):
                        r = out["responses"].setdefault(str(event.stream_id), {"headers": {}, "body": ""})
                        r["body"] += event.data.decode()
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        done.add(event.stream_id)
                    elif isinstance(event, h2.events.StreamReset):
                        r = out["responses"].setdefault(str(event.stream_id), {"headers": {}, "body": ""})
                        r["reset"] = int(event.error_code)
                        done.add(event.stream_id)
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        out["goaway"] = {"lastStreamID": event.last_stream_id, "errorCode": int(event.error_code),
                                         "debugData": (event.additional_data or b"").decode()}
                pending = conn.data_to_send()
                if pending:
                    tls.sendall(pending)
                return True

            def send(request):
                sid = conn.get_next_available_stream_id()
                headers = [(":method", request["method"]), (":scheme", "https"), (":authority", "localhost"),
                           (":path", request["path"])] + [tuple(h) for h in request["headers"]]
                body = request["body"].encode()
                conn.send_headers(sid, headers, end_stream=not body)
                if body:
                    conn.send_data(sid, body, end_stream=True)
                tls.sendall(conn.data_to_send())
                out["streamIDs"].append(sid)
                return sid

            def wait(until):
                try:
                    while not until() and time.time() < deadline:
                        if not pump():
                            return
                except (socket.timeout, ConnectionError, ssl.SSLError):
                    out["closed"] = True
                except h2.exceptions.ProtocolError:
                    # h2 treats a GOAWAY as the end of the connection and rejects any frame
                    # after it (e.g. a RST_STREAM refusing a stream that crossed the GOAWAY).
                    if out["goaway"] is None:
                        raise
                    out["framesAfterGoaway"] = True
                    # h2 parses nothing more; read raw bytes until the server closes, so
                    # `closed` does not depend on whether such a frame arrived.
                    try:
                        while time.time() < deadline:
                            if not tls.recv(65536):
                                out["closed"] = True
                                return
                    except (socket.timeout, ConnectionError, ssl.SSLError):
                        out["closed"] = True

            # The server's first SETTINGS come before any request.
            wait(lambda: len(out["maxConcurrentStreams"]) > 0)
            requests = connection["requests"]
            if connection.get("sequential"):
                for request in requests:
                    if out["closed"] or out["goaway"] is not None:
                        break
                    sid = send(request)
                    wait(lambda: sid in done)
            else:
                for request in requests:
                    send(request)
            wait(lambda: all(s in done for s in out["streamIDs"]) and (out["goaway"] is None or out["closed"]))
            tls.close()
            return out

        print(json.dumps([run(c) for c in spec["connections"]]))
        """#
}

/// The headers of a valid alert request, with `token` as bearer token.
func validHeaders(token: String, topic: String = SimulatorTestEnvironment.bundle, extra: [[String]] = []) -> [[String]] {
    [["authorization", "bearer \(token)"], ["apns-topic", topic], ["apns-push-type", "alert"]] + extra
}
