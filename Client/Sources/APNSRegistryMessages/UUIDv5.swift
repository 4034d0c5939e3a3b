import Foundation

/// Name-based UUIDs, version 5 (RFC 9562 §5.5: SHA-1 of namespace + name).
public enum UUIDv5 {
    /// The RFC's URL namespace, 6ba7b811-9dad-11d1-80b4-00c04fd430c8.
    public static let urlNamespace = UUID(uuid: (
        0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8))

    public static func make(namespace: UUID = urlNamespace, name: String) -> UUID {
        var message = withUnsafeBytes(of: namespace.uuid) { Array($0) }
        message += name.utf8
        var b = Array(NameDigest.sha1(message).prefix(16))
        b[6] = (b[6] & 0x0F) | 0x50
        b[8] = (b[8] & 0x3F) | 0x80
        return UUID(uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]))
    }

    /// The id of the job a group job fans out to one device (contract §6): the name
    /// `<group job id>/<bundleId>:<token>`, id in canonical lower case, token lower case.
    public static func fanOutJobID(groupJobID: UUID, bundleID: String, token: String) -> UUID {
        make(name: "\(groupJobID.uuidString.lowercased())/\(bundleID):\(token.lowercased())")
    }
}
