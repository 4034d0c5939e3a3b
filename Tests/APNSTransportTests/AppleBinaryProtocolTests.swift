/// The simulator's own reading of Apple's binary frames, without sockets: every rule of Apple's
/// table checked byte by byte, and frames the product encodes read back, so the two sides are
/// written apart but agree.
import APNSBinaryProtocol
import NIOCore
import Testing

@testable import APNSSimulator

@Suite("Simulator binary protocol")
struct AppleBinaryProtocolTests {
    private typealias Wire = AppleBinaryProtocol
    private let token = [UInt8](repeating: 0xAB, count: 32)
    private let payload = Array(#"{"aps":{"alert":"hi"}}"#.utf8)

    private func item(_ id: UInt8, _ data: [UInt8]) -> [UInt8] {
        [id, UInt8(data.count >> 8), UInt8(data.count & 0xFF)] + data
    }

    private func frame(_ items: [UInt8], command: UInt8 = 2) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeInteger(command)
        buffer.writeInteger(UInt32(items.count), endianness: .big)
        buffer.writeBytes(items)
        return buffer
    }

    private func read(_ bytes: ByteBuffer) -> Wire.ReadResult {
        var buffer = bytes
        return Wire.readFrame(from: &buffer)
    }

    @Test func readsEveryItemOfAFrameTheProductEncodes() throws {
        let encoded = try BinaryNotificationFrame(
            deviceToken: token, payload: payload, identifier: 0x0102_0304, expiration: 1_900_000_000, priority: 5
        ).encoded()
        var buffer = ByteBuffer(bytes: encoded + [2])
        let result = Wire.readFrame(from: &buffer)
        #expect(result == .frame(Wire.Frame(token: token, payload: payload, identifier: 0x0102_0304, expiration: 1_900_000_000, priority: 5)))
        #expect(buffer.readableBytes == 1, "the next frame's first byte stays in the buffer")
    }

    @Test func optionalItemsMayBeLeftOut() {
        let result = read(frame(item(1, token) + item(2, payload)))
        #expect(result == .frame(Wire.Frame(token: token, payload: payload, identifier: nil, expiration: nil, priority: nil)))
    }

    @Test func anIncompleteFrameWaitsAndConsumesNothing() {
        let whole = frame(item(1, token) + item(2, payload))
        for cut in [0, 1, 4, 5, whole.readableBytes - 1] {
            var buffer = whole.getSlice(at: 0, length: cut)!
            #expect(Wire.readFrame(from: &buffer) == .needMoreData)
            #expect(buffer.readableBytes == cut)
        }
    }

    @Test(arguments: [
        (UInt8(0), UInt8(128)), (1, 128), (8, 128),
    ])
    func onlyCommandTwoIsANotification(command: UInt8, status: UInt8) {
        guard case .refused(let refusal) = read(frame(item(1, token) + item(2, payload), command: command)) else {
            Issue.record("command \(command) was read as a frame")
            return
        }
        #expect(refusal.status == status)
    }

    /// Apple's error-response codes, each from a frame that breaks exactly one rule. The frame
    /// carries identifier 7 first, so the refusal names it.
    @Test(arguments: [
        ("no token", [UInt8](), UInt8(2)),
        ("a 31-byte token", [UInt8](repeating: 1, count: 31), UInt8(5)),
        ("a 33-byte token", [UInt8](repeating: 1, count: 33), UInt8(5)),
    ])
    func tokenRules(_ name: String, tokenBytes: [UInt8], status: UInt8) {
        let tokenItem = tokenBytes.isEmpty ? [] : item(1, tokenBytes)
        let result = read(frame(item(3, [0, 0, 0, 7]) + tokenItem + item(2, payload)))
        #expect(result == .refused(Wire.Refusal(status: status, identifier: 7, reason: refusalReason(result))), "\(name)")
    }

    @Test func payloadRules() {
        let missing = read(frame(item(3, [0, 0, 0, 9]) + item(1, token)))
        #expect(status(missing) == 4)
        let empty = read(frame(item(3, [0, 0, 0, 9]) + item(1, token) + item(2, [])))
        #expect(status(empty) == 4)
        let atLimit = read(frame(item(1, token) + item(2, [UInt8](repeating: 0x20, count: 2048))))
        guard case .frame = atLimit else { Issue.record("a 2048-byte payload was refused"); return }
        let over = read(frame(item(3, [0, 0, 0, 9]) + item(1, token) + item(2, [UInt8](repeating: 0x20, count: 2049))))
        #expect(over == .refused(Wire.Refusal(status: 7, identifier: 9, reason: refusalReason(over))))
    }

    @Test func structuralFaultsAreProtocolErrors() {
        let cases: [(String, [UInt8])] = [
            ("unknown item", item(1, token) + item(2, payload) + item(6, [1])),
            ("duplicate item", item(1, token) + item(1, token) + item(2, payload)),
            ("3-byte identifier", item(3, [0, 0, 1]) + item(1, token) + item(2, payload)),
            ("2-byte expiration", item(1, token) + item(2, payload) + item(4, [0, 1])),
            ("2-byte priority", item(1, token) + item(2, payload) + item(5, [0, 10])),
            ("cut item header", item(1, token) + item(2, payload) + [5, 0]),
            ("item longer than the frame", item(1, token) + item(2, payload) + [5, 0, 9, 10]),
        ]
        for (name, items) in cases {
            #expect(status(read(frame(items))) == 128, "\(name)")
        }
    }

    @Test func anImpossibleFrameLengthIsRefusedBeforeItsBytesArrive() {
        var buffer = ByteBuffer()
        buffer.writeInteger(UInt8(2))
        buffer.writeInteger(UInt32(Wire.frameLengthLimit + 1), endianness: .big)
        #expect(status(Wire.readFrame(from: &buffer)) == 128)
    }

    @Test func errorResponseAndFeedbackTupleBytes() {
        var response = ByteBuffer()
        Wire.writeErrorResponse(status: 8, identifier: 0x0A0B_0C0D, into: &response)
        #expect(Array(response.readableBytesView) == [8, 8, 0x0A, 0x0B, 0x0C, 0x0D])
        #expect(BinaryErrorResponse.decode(Array(response.readableBytesView)) == .response(BinaryErrorResponse(status: .invalidToken, identifier: 0x0A0B_0C0D)))

        var tuple = ByteBuffer()
        Wire.writeFeedbackTuple(timestamp: 0x6000_0001, token: token, into: &tuple)
        #expect(Array(tuple.readableBytesView) == [0x60, 0, 0, 1, 0, 32] + token)
    }

    private func status(_ result: Wire.ReadResult) -> UInt8? {
        if case .refused(let refusal) = result { return refusal.status }
        return nil
    }

    private func refusalReason(_ result: Wire.ReadResult) -> String {
        if case .refused(let refusal) = result { return refusal.reason }
        return ""
    }
}
