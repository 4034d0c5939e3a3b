/// An AMQP 0-9-1 publisher that writes its frames itself, for tests that must put on the wire
/// what a client library would not, or would change: a content header whose table nests as deep
/// as a 1 MiB frame allows, duplicate keys, unsigned kinds, keys out of order. Nothing is decoded
/// or re-encoded on the way out; the broker's confirm says it took the message. Blocking calls:
/// use it off the cooperative pool (`publishOffThePool`) or for a handful of messages.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

public final class RawAMQPPublisher {
    private let socket: Int32
    /// The frame size the broker offered and this connection took.
    public private(set) var frameMax = 0
    private var published: UInt64 = 0

    /// Connects to `127.0.0.1:port` as `user`, opens channel 1 in confirm mode. `timeout`: how
    /// long to wait for any one answer of the broker.
    public init(port: Int, user: String = "guest", password: String = "guest", timeout: Duration = .seconds(60)) throws {
        socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw TestSupportError("socket: \(errno)") }
        var wait = timeval(tv_sec: Int(timeout.components.seconds), tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(socket)
            throw TestSupportError("connect to port \(port): \(errno)")
        }
        try write(Array("AMQP".utf8) + [0, 0, 9, 1])
        _ = try method(10, 10)  // connection.start
        try send(method: 10, 11, Self.long([]) + Self.short("PLAIN") + Self.long(Array("\0\(user)\0\(password)".utf8)) + Self.short("en_US"))
        let tune = try method(10, 30)
        let channelMax = Array(tune[0..<2])
        frameMax = Int(tune[2..<6].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
        try send(method: 10, 31, channelMax + Self.bigEndian(UInt32(frameMax)) + [0, 0])
        try send(method: 10, 40, Self.short("/") + Self.short("") + [0])
        _ = try method(10, 41)
        try send(method: 20, 10, Self.short(""), channel: 1)
        _ = try method(20, 11)
        try send(method: 85, 10, [0], channel: 1)  // confirm.select
        _ = try method(85, 11)
    }

    deinit { Glibc.close(socket) }

    /// Publishes one message with `properties` as they go on the wire (property flags first)
    /// and waits for the broker's ack.
    public func publish(exchange: String, routingKey: String, properties: [UInt8], body: [UInt8]) throws {
        try send(method: 60, 40, [0, 0] + Self.short(exchange) + Self.short(routingKey) + [0], channel: 1)
        try frame(type: 2, channel: 1, [0, 60, 0, 0] + Self.bigEndian(UInt64(body.count)) + properties)
        var offset = 0
        while offset < body.count {
            let end = min(body.count, offset + frameMax - 8)
            try frame(type: 3, channel: 1, Array(body[offset..<end]))
            offset = end
        }
        published += 1
        let ack = try method(60, 80)
        let tag = ack[0..<8].reduce(UInt64(0)) { $0 << 8 | UInt64($1) }
        guard tag == published else { throw TestSupportError("the broker acked publish \(tag), expected \(published)") }
    }

    /// Closes the connection politely.
    public func close() throws {
        try send(method: 10, 50, [0, 200] + Self.short("") + [0, 0, 0, 0])
        _ = try method(10, 51)
    }

    // MARK: - Wire

    public static func bigEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] { withUnsafeBytes(of: value.bigEndian, Array.init) }
    public static func short(_ text: String) -> [UInt8] { [UInt8(text.utf8.count)] + Array(text.utf8) }
    /// A length-prefixed (32-bit) value: a long string, a table, an array.
    public static func long(_ bytes: [UInt8]) -> [UInt8] { bigEndian(UInt32(bytes.count)) + bytes }

    private func send(method classID: UInt16, _ methodID: UInt16, _ arguments: [UInt8], channel: UInt16 = 0) throws {
        try frame(type: 1, channel: channel, Self.bigEndian(classID) + Self.bigEndian(methodID) + arguments)
    }

    private func frame(type: UInt8, channel: UInt16, _ payload: [UInt8]) throws {
        try write([type] + Self.bigEndian(channel) + Self.bigEndian(UInt32(payload.count)) + payload + [0xCE])
    }

    private func write(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let sent = bytes[offset...].withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard sent > 0 else { throw TestSupportError("send: \(errno)") }
            offset += sent
        }
    }

    private func read(_ count: Int) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let got = out[offset...].withUnsafeMutableBytes { recv(socket, $0.baseAddress, $0.count, 0) }
            guard got > 0 else { throw TestSupportError("the broker closed the connection or did not answer (recv: \(got), errno \(errno))") }
            offset += got
        }
        return out
    }

    /// The arguments of the next method, which must be `classID.methodID` (heartbeats skipped);
    /// a close from the broker is thrown with its reply text.
    private func method(_ classID: UInt16, _ methodID: UInt16) throws -> [UInt8] {
        while true {
            let head = try read(7)
            let size = Int(head[3..<7].reduce(UInt32(0)) { $0 << 8 | UInt32($1) })
            let payload = try read(size + 1)
            guard payload.last == 0xCE else { throw TestSupportError("a frame without its end byte") }
            guard head[0] == 1 else { continue }
            let id = (UInt16(payload[0]) << 8 | UInt16(payload[1]), UInt16(payload[2]) << 8 | UInt16(payload[3]))
            if id == (classID, methodID) { return Array(payload[4..<size]) }
            if id == (10, 50) || id == (20, 40) {
                let text = String(decoding: payload[7..<7 + Int(payload[6])], as: UTF8.self)
                throw TestSupportError("the broker closed the \(id.0 == 10 ? "connection" : "channel"): \(text)")
            }
        }
    }
}
