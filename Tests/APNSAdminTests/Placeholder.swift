import Testing

// Replaced by the real suite of this target.
@Test func APNSAdminTestsBuilds() { #expect(Bool(true)) }
