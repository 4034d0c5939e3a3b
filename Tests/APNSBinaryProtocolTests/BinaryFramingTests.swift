import APNSBinaryProtocol
import APNSModel
import Foundation
import Testing

/// The binary provider framing against byte vectors worked out by hand from Apple's layout:
/// command (1), frame length (4, big-endian), items of id (1), length (2, big-endian), data.
@Suite struct BinaryFramingTests {
    /// Token 01 02 … 20, payload {"aps":{}}, identifier 0x01020304, expiration 1 700 000 000
    /// (0x6553F100), priority 10. Frame length = (3+32) + (3+10) + (3+4) + (3+4) + (3+1) = 66 = 0x42.
    static let fullFrameHex = """
        02 00000042
        01 0020 0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20
        02 000a 7b2261707322 3a7b7d7d
        03 0004 01020304
        04 0004 6553f100
        05 0001 0a
        """
    static let fullFrame = BinaryNotificationFrame(
        deviceToken: Array(1...32), payload: Array(#"{"aps":{}}"#.utf8), identifier: 0x0102_0304,
        expiration: 1_700_000_000, priority: 10)

    /// Token ff × 32, payload {} and no optional items: frame length = 35 + 5 = 40 = 0x28.
    static let minimalFrameHex = """
        02 00000028
        01 0020 ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff
        02 0002 7b7d
        """
    static let minimalFrame = BinaryNotificationFrame(
        deviceToken: [UInt8](repeating: 0xff, count: 32), payload: [0x7b, 0x7d], identifier: nil,
        expiration: nil, priority: nil)

    static let token32Hex = "01 0020 " + String(repeating: "ab", count: 32)

    // MARK: encoding

    @Test func encodesFullFrame() throws {
        let bytes = try Self.fullFrame.encoded()
        #expect(bytes == hexBytes(Self.fullFrameHex))
        #expect(bytes.count == 71)
    }

    @Test func encodesMinimalFrameWithoutOptionalItems() throws {
        #expect(try Self.minimalFrame.encoded() == hexBytes(Self.minimalFrameHex))
    }

    @Test func encodeAppendsToAnExistingBuffer() throws {
        var buffer: [UInt8] = [0xEE]
        try Self.minimalFrame.encode(into: &buffer)
        try Self.fullFrame.encode(into: &buffer)
        #expect(buffer == [0xEE] + hexBytes(Self.minimalFrameHex) + hexBytes(Self.fullFrameHex))
    }

    @Test func frameFromANotification() throws {
        let notification = PushNotification(
            id: UUID(), token: DeviceToken(bytes: Array(1...32)), topic: "com.example.app", pushType: .alert,
            priority: 10, expiration: 1_700_000_000, collapseID: "ignored", payload: Array(#"{"aps":{}}"#.utf8),
            environment: .production)
        let frame = try BinaryNotificationFrame(notification: notification, identifier: 0x0102_0304)
        #expect(frame == Self.fullFrame)
        #expect(try frame.encoded() == hexBytes(Self.fullFrameHex))

        var noExpiry = notification
        noExpiry.expiration = nil
        #expect(try BinaryNotificationFrame(notification: noExpiry, identifier: 1).expiration == nil)
    }

    @Test func notificationValuesThatDoNotFitAreRefused() {
        var n = PushNotification(
            id: UUID(), token: DeviceToken(bytes: Array(1...32)), topic: "t", pushType: .alert, priority: 10,
            expiration: -1, collapseID: nil, payload: [0x7b, 0x7d], environment: .production)
        #expect(throws: BinaryFramingError.valueOutOfRange(item: .expirationDate, value: -1)) {
            try BinaryNotificationFrame(notification: n, identifier: 1)
        }
        n.expiration = 4_294_967_296
        #expect(throws: BinaryFramingError.valueOutOfRange(item: .expirationDate, value: 4_294_967_296)) {
            try BinaryNotificationFrame(notification: n, identifier: 1)
        }
        n.expiration = 0
        n.priority = 300
        #expect(throws: BinaryFramingError.valueOutOfRange(item: .priority, value: 300)) {
            try BinaryNotificationFrame(notification: n, identifier: 1)
        }
    }

    @Test func itemLongerThanItsLengthFieldIsRefused() {
        var frame = Self.minimalFrame
        frame.payload = [UInt8](repeating: 0x20, count: 65_536)
        #expect(throws: BinaryFramingError.itemTooLong(item: .payload, length: 65_536)) { try frame.encoded() }
    }

    @Test func encoderDoesNotEnforceApplesSizeRules() throws {
        // The simulator's tests need frames Apple would refuse.
        var frame = Self.minimalFrame
        frame.deviceToken = [1, 2]
        #expect(try frame.encoded() == hexBytes("02 0000000a 01 0002 0102 02 0002 7b7d"))
    }

    // MARK: decoding

    @Test func decodesFullFrame() {
        #expect(BinaryNotificationFrame.decode(hexBytes(Self.fullFrameHex)) == .frame(Self.fullFrame, consumed: 71))
    }

    @Test func decodesMinimalFrame() {
        #expect(BinaryNotificationFrame.decode(hexBytes(Self.minimalFrameHex)) == .frame(Self.minimalFrame, consumed: 45))
    }

    @Test func decodesItemsInAnyOrder() {
        let bytes = hexBytes("""
            02 00000042
            05 0001 05
            03 0004 0000002a
            02 000a 7b2261707322 3a7b7d7d
            04 0004 00000000
            01 0020 0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20
            """)
        let expected = BinaryNotificationFrame(
            deviceToken: Array(1...32), payload: Array(#"{"aps":{}}"#.utf8), identifier: 42, expiration: 0, priority: 5)
        #expect(BinaryNotificationFrame.decode(bytes) == .frame(expected, consumed: 71))
    }

    @Test func everyStrictPrefixNeedsMoreData() {
        let bytes = hexBytes(Self.fullFrameHex)
        for length in 0..<bytes.count {
            #expect(BinaryNotificationFrame.decode(Array(bytes[..<length])) == .needMoreData, "prefix \(length)")
        }
    }

    @Test func streamOfFramesDecodesOneAtATime() {
        var stream = hexBytes(Self.fullFrameHex) + hexBytes(Self.minimalFrameHex) + [0x02, 0x00]
        var frames: [BinaryNotificationFrame] = []
        while case .frame(let frame, let consumed) = BinaryNotificationFrame.decode(stream) {
            frames.append(frame)
            stream.removeFirst(consumed)
        }
        #expect(frames == [Self.fullFrame, Self.minimalFrame])
        #expect(stream == [0x02, 0x00])
        #expect(BinaryNotificationFrame.decode(stream) == .needMoreData)
    }

    @Test func decodesFromARawBufferSlice() {
        let bytes = [0x99] + hexBytes(Self.minimalFrameHex)
        let result = bytes.withUnsafeBytes { BinaryNotificationFrame.decode(UnsafeRawBufferPointer(rebasing: $0[1...])) }
        #expect(result == .frame(Self.minimalFrame, consumed: 45))
    }

    struct BadFrame: Sendable, CustomTestStringConvertible {
        var name: String
        var hex: String
        var status: BinaryStatus
        var identifier: UInt32?
        var mentions: String
        var testDescription: String { name }
    }

    static let badFrames: [BadFrame] = [
        BadFrame(name: "enhanced format command 1", hex: "01 00000001", status: .protocolError, mentions: "unknown command 1"),
        BadFrame(name: "simple format command 0", hex: "00", status: .protocolError, mentions: "unknown command 0"),
        BadFrame(name: "error response sent to the server", hex: "08 08 00000001", status: .protocolError, mentions: "unknown command 8"),
        BadFrame(name: "frame length beyond any valid frame", hex: "02 ffffffff", status: .protocolError, mentions: "exceeds"),
        BadFrame(name: "empty frame", hex: "02 00000000", status: .missingDeviceToken, mentions: "no device token"),
        BadFrame(name: "missing token", hex: "02 00000005  02 0002 7b7d", status: .missingDeviceToken, mentions: "no device token"),
        BadFrame(name: "empty token item", hex: "02 00000008  01 0000  02 0002 7b7d", status: .missingDeviceToken, mentions: "no device token"),
        BadFrame(name: "31-byte token, identifier first",
                 hex: "02 0000002e  03 0004 00000007  01 001f " + String(repeating: "ab", count: 31) + "  02 0002 7b7d",
                 status: .invalidTokenSize, identifier: 7, mentions: "31 bytes"),
        BadFrame(name: "33-byte token, identifier last",
                 hex: "02 00000030  01 0021 " + String(repeating: "ab", count: 33) + "  02 0002 7b7d  03 0004 00000009",
                 status: .invalidTokenSize, identifier: 9, mentions: "33 bytes"),
        BadFrame(name: "missing payload", hex: "02 00000023  " + token32Hex, status: .missingPayload, mentions: "no payload"),
        BadFrame(name: "empty payload item", hex: "02 00000026  " + token32Hex + "  02 0000", status: .missingPayload, mentions: "no payload"),
        BadFrame(name: "unknown item id 6", hex: "02 0000002c  " + token32Hex + "  02 0002 7b7d  06 0001 00",
                 status: .protocolError, mentions: "unknown item id 6"),
        BadFrame(name: "duplicate priority", hex: "02 00000030  " + token32Hex + "  02 0002 7b7d  05 0001 0a  05 0001 05",
                 status: .protocolError, mentions: "duplicate item 5"),
        BadFrame(name: "duplicate token", hex: "02 00000046  " + token32Hex + "  " + token32Hex, status: .protocolError, mentions: "duplicate item 1"),
        BadFrame(name: "item longer than the frame", hex: "02 00000005  02 000a 7b7d", status: .protocolError, mentions: "declares 10 bytes but only 2 remain"),
        BadFrame(name: "truncated item header", hex: "02 00000002  01 00", status: .protocolError, mentions: "truncated item header"),
        BadFrame(name: "identifier of 3 bytes", hex: "02 0000002e  " + token32Hex + "  02 0002 7b7d  03 0003 000001",
                 status: .protocolError, mentions: "identifier item is 3 bytes"),
        BadFrame(name: "expiration of 2 bytes, identifier known",
                 hex: "02 00000034  03 0004 0000000b  " + token32Hex + "  02 0002 7b7d  04 0002 0000",
                 status: .protocolError, identifier: 11, mentions: "expiration item is 2 bytes"),
        BadFrame(name: "priority of 2 bytes", hex: "02 0000002d  " + token32Hex + "  02 0002 7b7d  05 0002 000a",
                 status: .protocolError, mentions: "priority item is 2 bytes"),
    ]

    @Test(arguments: badFrames)
    func rejectsBadFrame(_ bad: BadFrame) {
        guard case .invalid(let error) = BinaryNotificationFrame.decode(hexBytes(bad.hex)) else {
            Issue.record("not rejected: \(bad.name)")
            return
        }
        #expect(error.status == bad.status)
        #expect(error.identifier == bad.identifier)
        #expect(error.message.contains(bad.mentions), "message: \(error.message)")
    }

    @Test func payloadOver2048BytesIsInvalidPayloadSize() {
        // Frame length = (3+32) + 3 + 2049 = 2087 = 0x827; the payload length 2049 = 0x0801.
        let bytes = hexBytes("02 00000827  " + Self.token32Hex + "  02 0801") + [UInt8](repeating: 0x20, count: 2049)
        guard case .invalid(let error) = BinaryNotificationFrame.decode(bytes) else {
            Issue.record("2049-byte payload accepted")
            return
        }
        #expect(error.status == .invalidPayloadSize)
        #expect(error.response.encoded() == hexBytes("08 07 00000000"))
    }

    @Test func payloadOf2048BytesIsAccepted() {
        // Frame length = 35 + 3 + 2048 = 2086 = 0x826; the payload length 2048 = 0x0800.
        let bytes = hexBytes("02 00000826  " + Self.token32Hex + "  02 0800") + [UInt8](repeating: 0x20, count: 2048)
        guard case .frame(let frame, let consumed) = BinaryNotificationFrame.decode(bytes) else {
            Issue.record("2048-byte payload refused")
            return
        }
        #expect(consumed == 2091)
        #expect(frame.payload.count == 2048)
    }

    @Test func errorForAFaultNamesTheFrame() {
        let bytes = hexBytes("02 0000002e  03 0004 0000abcd  01 001f " + String(repeating: "ab", count: 31) + "  02 0002 7b7d")
        guard case .invalid(let error) = BinaryNotificationFrame.decode(bytes) else {
            Issue.record("bad token size accepted")
            return
        }
        #expect(error.response == BinaryErrorResponse(status: .invalidTokenSize, identifier: 0xabcd))
        #expect(error.response.encoded() == hexBytes("08 05 0000abcd"))
    }

    // MARK: error responses

    @Test func encodesErrorResponses() {
        #expect(BinaryErrorResponse(status: .invalidToken, identifier: 42).encoded() == hexBytes("08 08 0000002a"))
        #expect(BinaryErrorResponse(status: .shutdown, identifier: 0x1234_5678).encoded() == hexBytes("08 0a 12345678"))
        #expect(BinaryErrorResponse(status: .unknown, identifier: .max).encoded() == hexBytes("08 ff ffffffff"))
    }

    @Test func decodesErrorResponses() {
        #expect(BinaryErrorResponse.decode(hexBytes("08 08 0000002a"))
            == .response(BinaryErrorResponse(status: .invalidToken, identifier: 42)))
        #expect(BinaryErrorResponse.decode(hexBytes("08 80 deadbeef 02"))
            == .response(BinaryErrorResponse(status: .protocolError, identifier: 0xdead_beef)))
        #expect(BinaryErrorResponse.decode(hexBytes("08 0b 00000001"))
            == .response(BinaryErrorResponse(status: BinaryStatus(rawValue: 11), identifier: 1)))
    }

    @Test func errorResponsePrefixesNeedMoreData() {
        let bytes = hexBytes("08 08 0000002a")
        for length in 0..<6 {
            #expect(BinaryErrorResponse.decode(Array(bytes[..<length])) == .needMoreData)
        }
    }

    @Test func errorResponseWithWrongCommandIsInvalid() {
        #expect(BinaryErrorResponse.decode(hexBytes("02")) == .invalid(command: 2))
        #expect(BinaryErrorResponse.decode(hexBytes("48 54 54 50 2f 31")) == .invalid(command: 0x48))
    }

    static let statusNames: [(UInt8, String)] = [
        (0, "NoErrors"), (1, "ProcessingError"), (2, "MissingDeviceToken"), (3, "MissingTopic"),
        (4, "MissingPayload"), (5, "InvalidTokenSize"), (6, "InvalidTopicSize"), (7, "InvalidPayloadSize"),
        (8, "InvalidToken"), (10, "Shutdown"), (128, "ProtocolError"), (255, "Unknown"), (9, "Status9"),
    ]

    @Test(arguments: statusNames)
    func statusHasItsName(_ code: UInt8, _ name: String) {
        #expect(BinaryStatus(rawValue: code).name == name)
        #expect(BinaryStatus(rawValue: code).description == "\(code) (\(name))")
    }
}
