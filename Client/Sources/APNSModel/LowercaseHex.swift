import Foundation

/// Lower-case hexadecimal text written straight into a string's storage: device tokens on every
/// request path and job ids in every `apns-id`, once per notification on the hot path, where
/// building an array first (or Foundation's `uuidString` plus `lowercased()`) showed on the profile.
public enum LowercaseHex {
    private static let digits: StaticString = "0123456789abcdef"

    /// `bytes` as lower-case hex digits, two per byte, after `prefix` (ASCII) in the same string:
    /// a request path is one allocation, not the digits' and then the concatenation's.
    public static func string(_ bytes: some Collection<UInt8>, after prefix: StaticString = "") -> String {
        String(unsafeUninitializedCapacity: prefix.utf8CodeUnitCount + bytes.count * 2) { out in
            digits.withUTF8Buffer { digits in
                var i = 0
                prefix.withUTF8Buffer { prefix in
                    for c in prefix {
                        out[i] = c
                        i += 1
                    }
                }
                for byte in bytes {
                    out[i] = digits[Int(byte >> 4)]
                    out[i + 1] = digits[Int(byte & 0x0f)]
                    i += 2
                }
                return i
            }
        }
    }

    /// The UUID a canonical 8-4-4-4-12 text names, in either case; nil for anything else, as
    /// `UUID(uuidString:)` would say. Written here because Foundation's parses with `sscanf`,
    /// which was 1 % of the worker's CPU reading the `apns-id` of every answer (`perf`,
    /// docs/benchmarks.md).
    public static func uuid(_ text: String) -> UUID? {
        var text = text
        return text.withUTF8 { utf8 -> UUID? in
            guard utf8.count == 36 else { return nil }
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            let valid = withUnsafeMutableBytes(of: &bytes) { out -> Bool in
                var i = 0
                for position in 0..<16 {
                    if position == 4 || position == 6 || position == 8 || position == 10 {
                        guard utf8[i] == UInt8(ascii: "-") else { return false }
                        i += 1
                    }
                    guard let high = DeviceToken.hexDigitValue(utf8[i]), let low = DeviceToken.hexDigitValue(utf8[i + 1]) else {
                        return false
                    }
                    out[position] = high << 4 | low
                    i += 2
                }
                return true
            }
            return valid ? UUID(uuid: bytes) : nil
        }
    }

    /// The canonical lower-case form of a UUID (8-4-4-4-12), as `apns-id` carries it.
    public static func string(_ uuid: UUID) -> String {
        withUnsafeBytes(of: uuid.uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { out in
                digits.withUTF8Buffer { digits in
                    var i = 0
                    for (position, byte) in bytes.enumerated() {
                        if position == 4 || position == 6 || position == 8 || position == 10 {
                            out[i] = UInt8(ascii: "-")
                            i += 1
                        }
                        out[i] = digits[Int(byte >> 4)]
                        out[i + 1] = digits[Int(byte & 0x0f)]
                        i += 2
                    }
                    return i
                }
            }
        }
    }
}
