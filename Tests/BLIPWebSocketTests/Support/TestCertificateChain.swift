import Foundation

/// A test CA and a `localhost` certificate it signed, made with the openssl command at test time: the
/// server presents `certificatePath` (leaf, then CA) with `keyPath`.
struct TestCertificateChain {
    let directory: URL
    var certificatePath: String { self.directory.appendingPathComponent("chain.pem").path }
    var keyPath: String { self.directory.appendingPathComponent("key.pem").path }
    var caPath: String { self.directory.appendingPathComponent("ca.pem").path }

    static func make() throws -> TestCertificateChain {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blip-chain-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        func path(_ name: String) -> String { directory.appendingPathComponent(name).path }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        try Self.openssl(
            ["req", "-x509"] + ec + [
                "-keyout", path("ca-key.pem"), "-out", path("ca.pem"), "-days", "2", "-subj", "/CN=BLIP Test CA",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            ]
        )
        try Self.openssl(
            ["req"] + ec + ["-keyout", path("key.pem"), "-out", path("leaf.csr"), "-subj", "/CN=localhost"]
        )
        let extensions = """
            subjectAltName=DNS:localhost,IP:127.0.0.1
            basicConstraints=critical,CA:FALSE
            keyUsage=critical,digitalSignature
            extendedKeyUsage=serverAuth
            """
        try extensions.write(toFile: path("leaf.ext"), atomically: true, encoding: .utf8)
        try Self.openssl([
            "x509", "-req", "-in", path("leaf.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca-key.pem"),
            "-CAcreateserial", "-out", path("leaf.pem"), "-days", "2", "-extfile", path("leaf.ext"),
        ])
        let chain =
            try String(contentsOfFile: path("leaf.pem"), encoding: .utf8)
            + String(contentsOfFile: path("ca.pem"), encoding: .utf8)
        try chain.write(toFile: path("chain.pem"), atomically: true, encoding: .utf8)
        return TestCertificateChain(directory: directory)
    }

    private static func openssl(_ arguments: [String]) throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw ProxyTestError("openssl \(arguments[0]) failed") }
    }

    func remove() {
        try? FileManager.default.removeItem(at: self.directory)
    }
}
