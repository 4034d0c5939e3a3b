// libFuzzer target: the configuration file, from text to a validated WorkerConfiguration, in
// memory (no file is opened: credential files are not checked). Any input must either load or
// be refused with a ConfigurationError; nothing may trap.
import APNSConfig
import FuzzDriver

/// The executable's `main` (see Package.swift): libFuzzer's driver with this target's input function.
@_cdecl("FuzzConfig_main")
public func fuzzConfigMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv) { data, size in
        guard let data else { return fuzzConfig(UnsafePointer(bitPattern: 1)!, 0) }
        return fuzzConfig(data, size)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzConfig(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do throws(ConfigurationError) {
        let document = try ConfigDocument.parse(text, path: "/fuzz/apns-worker.conf")
        _ = try ConfigurationLoader.load(document: document, environment: [:], credentials: .skipFiles)
    } catch {
        _ = error.description
    }
    return 0
}
