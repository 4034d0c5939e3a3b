import APNSConfig
import Testing

@Suite("gcfg parser")
struct ParserTests {
    @Test func commentsQuotingAndWhitespace() throws {
        let text = """
            ; a whole-line comment
            # another
              [Section]   ; trailing comment after a header
            plain = some value   ; trailing comment
            hash = value # hash comment
            quoted = "  spaced ; not # a comment  "
            mixed = a "b c" d
            escapes = "tab\\there \\"q\\" back\\\\slash\\nnewline"
            outside = x\\"y
            empty =
            bare

            [sub "com.example.App"]
            Key = 1
            [sub "with \\"quote\\" and \\\\"]
            """
        let document = try ConfigDocument.parse(text, path: "t.conf")
        #expect(document.sections.count == 3)
        let section = document.sections[0]
        #expect(section.name == "Section")
        #expect(section.subsection == nil)
        #expect(section.line == 3)
        let values = Dictionary(uniqueKeysWithValues: section.entries.map { ($0.name, $0.value) })
        #expect(values["plain"] == "some value")
        #expect(values["hash"] == "value")
        #expect(values["quoted"] == "  spaced ; not # a comment  ")
        #expect(values["mixed"] == "a b c d")
        #expect(values["escapes"] == "tab\there \"q\" back\\slash\nnewline")
        #expect(values["outside"] == "x\"y")
        #expect(values["empty"] == "")
        #expect(values["bare"] == .some(nil))
        #expect(section.entries.map(\.line) == [4, 5, 6, 7, 8, 9, 10, 11])
        #expect(document.sections[1].subsection == "com.example.App")
        #expect(document.sections[1].line == 13)
        #expect(document.sections[1].entries(forKey: "KEY").first?.value == "1")
        #expect(document.sections[2].subsection == "with \"quote\" and \\")
        #expect(document.sections[2].displayName == "[sub \"with \\\"quote\\\" and \\\\\"]")
    }

    @Test func repeatedKeysKeepOrderAndLines() throws {
        let text = "[amqp]\nurl = amqp://a\r\nURL = amqp://b\n\nUrl=amqp://c\n"
        let document = try ConfigDocument.parse(text, path: "t.conf")
        let entries = document.sections[0].entries(forKey: "url")
        #expect(entries.map(\.value) == ["amqp://a", "amqp://b", "amqp://c"])
        #expect(entries.map(\.line) == [2, 3, 5])
    }

    @Test(arguments: [
        ("[amqp]\nurl = \"amqp://x", 2, "url", "unterminated quoted value"),
        ("[amqp]\nurl = a\\qb", 2, "url", "unknown escape \"\\q\""),
        ("[amqp]\nurl = a\\", 2, "url", "line continuation is not supported"),
        ("[amqp]\n= value", 2, nil, "expected key = value"),
        ("[amqp]\nurl value", 2, "url", "expected \"=\" after the key"),
        ("url = amqp://x\n[amqp]", 1, "url", "key outside of any section"),
        ("\n\n[apns.com.example]", 3, nil, "use [apns \"sub.section\"], not the dotted form"),
        ("[amqp", 1, nil, "bad section header"),
        ("[apns \"x]", 1, nil, "unterminated subsection name"),
        ("[amqp] extra", 1, nil, "unexpected \"e\" after the section header"),
        ("[9x]", 1, nil, "bad section header"),
    ] as [(String, Int, String?, String)])
    func syntaxErrors(text: String, line: Int, key: String?, fragment: String) {
        #expect {
            try ConfigDocument.parse(text, path: "dir/bad.conf")
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            let prefix = "dir/bad.conf:\(line): " + (key.map { "\($0): " } ?? "")
            return error.kind == .syntax && error.key == key && error.description.hasPrefix(prefix)
                && error.description.contains(fragment) && !error.description.contains("\n")
        }
    }

    @Test func duplicateSectionIsAnError() {
        let text = "[amqp]\nurl = amqp://a\n[AMQP]\nprefetch = 1"
        #expect {
            try ConfigDocument.parse(text, path: "d.conf")
        } throws: { error in
            (error as? ConfigurationError)?.description
                == "d.conf:3: [amqp]: appears again (first at line 1); put all its keys in one section"
        }
    }

    @Test func unreadableFile() {
        #expect {
            try ConfigDocument.load(path: "/nonexistent/apns.conf")
        } throws: { error in
            guard let error = error as? ConfigurationError else { return false }
            return error.kind == .unreadableFile && error.description.hasPrefix("/nonexistent/apns.conf: cannot read the file")
        }
    }
}
