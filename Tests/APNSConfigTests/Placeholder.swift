import Testing

// Replaced by the real suite of this target.
@Test func APNSConfigTestsBuilds() { #expect(Bool(true)) }
