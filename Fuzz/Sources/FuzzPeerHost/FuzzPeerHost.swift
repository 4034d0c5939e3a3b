// libFuzzer target: the broker host PeerSecurity reads by hand from an AMQP URL (`host(of:)`,
// no URLComponents) to warn about plaintext AMQP beyond loopback. The oracle is the AMQP
// client's own reader (`AMQPURL(string:)`): the warning is about the host the worker connects
// to. For any input (as a String when it is valid UTF-8): nothing traps; for a URL the client
// accepts, the host read is the client's (an empty one is the client's `localhost`), and the
// start-up warning is given exactly when the client would speak plaintext to a non-loopback host.
import AMQPClient
import APNSConfig
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzPeerHost_main")
public func fuzzPeerHostMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzPeerHost(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzPeerHost(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPeerHost(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    // A configuration value is text: bytes that are not UTF-8 never reach the reader.
    guard let url = String(validating: UnsafeBufferPointer(start: data, count: size), as: UTF8.self) else { return 0 }
    let host = PeerSecurity.host(of: url)
    precondition(host?.isEmpty != true, "an empty host read from \(url.debugDescription)")
    let configuration = WorkerConfiguration(
        amqp: AMQPSettings(urls: [url]),
        bundles: [BundleConfiguration(bundleID: "com.example.app", auth: .token(teamID: "TEAM123456", keyID: "KEY1234567", tokenKeyFile: "/k.p8"))])
    let warned = !PeerSecurity.warnings(configuration).isEmpty
    // A URL the client refuses stops the worker at start-up: no connection to warn about.
    guard let client = try? AMQPURL(string: url) else { return 0 }
    precondition(
        (host ?? "localhost") == client.host,
        "\(url.debugDescription): PeerSecurity reads host \(host.debugDescription), the AMQP client connects to \(client.host.debugDescription)")
    let exposed = !client.tls && !ListenAddress(host: client.host, port: client.port).isLoopback
    precondition(
        warned == exposed,
        "\(url.debugDescription): warned \(warned), but the client connects \(client.tls ? "with TLS" : "in plaintext") to \(client.host.debugDescription)")
    return 0
}
