/// `h2-floor`: what SwiftNIO's own HTTP/2 and TLS cost a request on this machine, with none of
/// the worker's code: TCP, NIOSSL, `NIOHTTP2Handler` and a handler that opens a stream per
/// request with the headers and body size a notification has, keeps a fixed number in flight and
/// counts the answers. Its CPU a request, beside `amqp-c-loop`'s (or the performance kit's C
/// ceiling's) CPU a message, is the least a worker built on these libraries can spend on a job,
/// so the worker's CPU bars are judged against it (docs/benchmarks.md, "The floor under the
/// CPU bar").
///
/// It points at any HTTP/2 server that answers POST /3/device/<token>; the kit's sink (nghttpd,
/// `../shared/perf/sink.sh start`) answers 200 for the kit's tokens. Hand-written because it
/// measures the libraries bare: a client library would add its own costs to the floor.
import Foundation
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix
import NIOSSL

struct Options {
    var host = "127.0.0.1"
    var port = 8450
    var caFile = "/tmp/apns-perf/certs/ca.pem"
    var tokensFile = "/tmp/apns-perf/tokens.txt"
    var requests = 200_000
    var warmup = 5_000
    var inFlight = 1_000
    var connections = 2
    var threads = 1
    var rounds = 3

    static let usage = """
        usage: h2-floor [--host H] [--port P] [--ca FILE] [--tokens FILE] [--requests N] [--warmup N]
                        [--in-flight W] [--connections C] [--threads T] [--rounds R]
        """

    static func parse(_ arguments: [String]) -> Options {
        var options = Options()
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { fail("\(flag) needs a value") }
            func int() -> Int {
                guard let number = Int(value), number > 0 else { fail("\(flag) needs a positive number, not \(value)") }
                return number
            }
            switch flag {
            case "--host": options.host = value
            case "--port": options.port = int()
            case "--ca": options.caFile = value
            case "--tokens": options.tokensFile = value
            case "--requests": options.requests = int()
            case "--warmup": options.warmup = int()
            case "--in-flight": options.inFlight = int()
            case "--connections": options.connections = int()
            case "--threads": options.threads = int()
            case "--rounds": options.rounds = int()
            default: fail("unknown option \(flag)")
            }
        }
        return options
    }

    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("h2-floor: \(message)\n\(usage)\n".utf8))
        exit(2)
    }
}

/// What every request carries, made once: the notification's headers and body as a worker sends
/// them (apns-topic, push type, priority, id, a bearer token of a real one's length, content type).
struct RequestShape: Sendable {
    let authority: String
    let paths: [String]
    let body: ByteBuffer
    let bearer = "bearer " + String(repeating: "e", count: 36) + "." + String(repeating: "e", count: 70) + "."
        + String(repeating: "s", count: 86)

    func headers(request: Int) -> HPACKHeaders {
        var headers = HPACKHeaders()
        headers.add(name: ":method", value: "POST")
        headers.add(name: ":scheme", value: "https")
        headers.add(name: ":path", value: paths[request % paths.count], indexing: .nonIndexable)
        headers.add(name: ":authority", value: authority)
        headers.add(name: "apns-topic", value: "com.example.perf")
        headers.add(name: "apns-push-type", value: "alert")
        headers.add(name: "apns-priority", value: "10")
        headers.add(name: "apns-id", value: Self.id(request), indexing: .nonIndexable)
        headers.add(name: "authorization", value: bearer)
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(body.readableBytes))
        return headers
    }

    /// A UUID-shaped id that differs per request, without the cost of a random UUID.
    static func id(_ request: Int) -> String {
        let hex = String(request, radix: 16)
        return "00000000-0000-4000-8000-" + String(repeating: "0", count: max(0, 12 - hex.count)) + hex
    }
}

/// One connection's requests: keeps `inFlight` streams open until `toSend` reaches zero,
/// flushing once per read burst, and fulfils `done` when the last answer is in.
final class FloorHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    private let shape: RequestShape
    private var nextStreamID = 1
    private var sequence = 0
    private var toSend = 0
    private var open = 0
    private var inFlight = 0
    private(set) var notOK = 0
    private var done: EventLoopPromise<Void>?
    private var context: ChannelHandlerContext?

    init(shape: RequestShape) {
        self.shape = shape
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    /// Sends `count` requests, `inFlight` at a time, and counts this run's answers that were not
    /// 200 in `notOK`; called on the channel's event loop.
    func run(count: Int, inFlight: Int, done: EventLoopPromise<Void>) {
        guard let context else { return done.fail(ChannelError.ioOnClosedChannel) }
        self.toSend = count
        self.inFlight = inFlight
        self.notOK = 0
        self.done = done
        fill(context: context)
        context.flush()
        succeedWhenAllAnswered()
    }

    private func fill(context: ChannelHandlerContext) {
        while open < inFlight, toSend > 0 {
            let streamID = HTTP2StreamID(nextStreamID)
            nextStreamID += 2
            let headers = shape.headers(request: sequence)
            sequence += 1
            toSend -= 1
            open += 1
            context.write(wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .headers(.init(headers: headers)))), promise: nil)
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: streamID, payload: .data(.init(data: .byteBuffer(shape.body), endStream: true)))),
                promise: nil)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.payload {
        case .headers(let headers):
            if headers.headers.first(name: ":status") != "200" { notOK += 1 }
            if headers.endStream { finished() }
        case .data(let data):
            if data.endStream { finished() }
        case .rstStream:
            notOK += 1
            finished()
        default:
            break
        }
    }

    private func finished() {
        open -= 1
        succeedWhenAllAnswered()
    }

    /// Also right at the start: a connection given no requests (fewer than connections) is done.
    private func succeedWhenAllAnswered() {
        if toSend == 0, open == 0 {
            let promise = done
            done = nil
            promise?.succeed()
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        fill(context: context)
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        done?.fail(error)
        done = nil
        context.close(promise: nil)
    }

    /// The connection's receive window, granted again as NIOHTTP2's stream multiplexer would
    /// (which this handler replaces): back to the whole once half is spent. Without it a
    /// connection stops receiving answer bodies after 65,535 bytes of them.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream,
            let size = window.inboundWindowSize, size <= 65_535 / 2
        {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: 65_535 - size))), promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    /// A server that closes the connection with answers still owed ends the run, not hangs it.
    func channelInactive(context: ChannelHandlerContext) {
        done?.fail(ChannelError.ioOnClosedChannel)
        done = nil
        context.fireChannelInactive()
    }
}

/// User plus system CPU of this process so far, all threads, in seconds.
func processCPUSeconds() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

/// A connection and its handler, which only its event loop may touch.
struct Connection: Sendable {
    var channel: any Channel
    var handler: NIOLoopBound<FloorHandler>
}

func connect(options: Options, group: any EventLoopGroup, tls: NIOSSLContext, shape: RequestShape) async throws -> Connection {
    let channel = try await ClientBootstrap(group: group)
        .channelOption(ChannelOptions.tcpOption(.tcp_nodelay), value: 1)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                let sync = channel.pipeline.syncOperations
                try sync.addHandler(NIOSSLClientHandler(context: tls, serverHostname: nil))
                try sync.addHandler(
                    NIOHTTP2Handler(
                        mode: .client, initialSettings: [HTTP2Setting(parameter: .enablePush, value: 0)],
                        headerBlockValidation: .disabled, contentLengthValidation: .disabled))
                try sync.addHandler(FloorHandler(shape: shape))
            }
        }
        .connect(host: options.host, port: options.port).get()
    let handler = try await channel.eventLoop.submit {
        NIOLoopBound(try channel.pipeline.syncOperations.handler(type: FloorHandler.self), eventLoop: channel.eventLoop)
    }.get()
    return Connection(channel: channel, handler: handler)
}

/// Runs `count` requests spread over the connections; returns the answers that were not 200.
func drive(_ connections: [Connection], count: Int, inFlight: Int) async throws -> Int {
    var futures: [EventLoopFuture<Void>] = []
    for (index, connection) in connections.enumerated() {
        let share = count / connections.count + (index < count % connections.count ? 1 : 0)
        let window = inFlight / connections.count + (index < inFlight % connections.count ? 1 : 0)
        let eventLoop = connection.channel.eventLoop
        let promise = eventLoop.makePromise(of: Void.self)
        eventLoop.execute { connection.handler.value.run(count: share, inFlight: max(1, window), done: promise) }
        futures.append(promise.futureResult)
    }
    for future in futures { try await future.get() }
    var notOK = 0
    for connection in connections {
        notOK += try await connection.channel.eventLoop.submit { connection.handler.value.notOK }.get()
    }
    return notOK
}

let options = Options.parse(Array(CommandLine.arguments.dropFirst()))
let tokens: [String]
do {
    tokens = try String(contentsOfFile: options.tokensFile, encoding: .utf8).split(separator: "\n").map(String.init)
} catch {
    Options.fail("cannot read the tokens in \(options.tokensFile): \(error.localizedDescription)")
}
guard !tokens.isEmpty else { Options.fail("no tokens in \(options.tokensFile)") }
let body = ByteBuffer(
    string: #"{"aps":{"alert":{"title":"Sync","body":"Your documents changed on another device; open the app to see them."},"#
        + #""sound":"default","badge":1},"sync":{"account":"a-0001","change":123456}}"#)
let shape = RequestShape(authority: "\(options.host):\(options.port)", paths: tokens.map { "/3/device/" + $0 }, body: body)

var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
tlsConfiguration.trustRoots = .file(options.caFile)
tlsConfiguration.applicationProtocols = ["h2"]
let tls = try NIOSSLContext(configuration: tlsConfiguration)
let group = MultiThreadedEventLoopGroup(numberOfThreads: options.threads)
var connections: [Connection] = []
for _ in 0..<options.connections {
    connections.append(try await connect(options: options, group: group, tls: tls, shape: shape))
}
print("h2-floor: \(options.host):\(options.port), \(options.connections) connection(s) on \(options.threads) thread(s), \(options.inFlight) in flight, body \(body.readableBytes) B")
_ = try await drive(connections, count: options.warmup, inFlight: options.inFlight)
for round in 1...options.rounds {
    let cpuBefore = processCPUSeconds()
    let start = ContinuousClock.now
    let notOK = try await drive(connections, count: options.requests, inFlight: options.inFlight)
    let elapsed = start.duration(to: .now)
    let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
    let cpu = processCPUSeconds() - cpuBefore
    print(
        String(
            format: "round %d: %d requests in %.2f s, %.0f requests/s, %.1f µs CPU a request, %d not 200",
            round, options.requests, seconds, Double(options.requests) / seconds, cpu / Double(options.requests) * 1e6, notOK))
}
for connection in connections { try? await connection.channel.close().get() }
try await group.shutdownGracefully()
