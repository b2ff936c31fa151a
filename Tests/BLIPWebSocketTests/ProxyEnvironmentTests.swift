import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import Testing

/// `https_proxy`, `http_proxy`, `all_proxy` and `no_proxy` as curl reads them.
@Suite("Proxy from the environment")
struct ProxyEnvironmentTests {
    static func proxy(
        _ environment: [String: String],
        host: String = "sync.example.com",
        port: Int = 4984,
        secure: Bool = true
    ) throws -> String? {
        try BLIPProxy.fromEnvironment(host: host, port: port, isSecure: secure, environment: environment)?.description
    }

    @Test("the variable for the scheme, then all_proxy; lower case first; no HTTP_PROXY")
    func variables() throws {
        #expect(try Self.proxy([:]) == nil)
        #expect(try Self.proxy(["https_proxy": "http://a:3128"]) == "http://a:3128")
        #expect(try Self.proxy(["HTTPS_PROXY": "http://b:3128"]) == "http://b:3128")
        #expect(try Self.proxy(["https_proxy": "http://a:3128", "HTTPS_PROXY": "http://b:3128"]) == "http://a:3128")
        #expect(try Self.proxy(["https_proxy": "http://a:3128", "all_proxy": "socks5://c"]) == "http://a:3128")
        #expect(try Self.proxy(["ALL_PROXY": "socks5h://c"]) == "socks5://c:1080")
        // ws:// reads http_proxy, and only in lower case, as curl does.
        #expect(try Self.proxy(["http_proxy": "d:8080"], secure: false) == "http://d:8080")
        #expect(try Self.proxy(["HTTP_PROXY": "http://d:8080"], secure: false) == nil)
        #expect(try Self.proxy(["https_proxy": "http://a:3128"], secure: false) == nil)
        #expect(try Self.proxy(["http_proxy": "", "all_proxy": "http://e"], secure: false) == "http://e:1080")
        #expect(try Self.proxy(["https_proxy": "", "HTTPS_PROXY": "http://b"]) == "http://b:1080")
        #expect(try Self.proxy(["wss_proxy": "socks5://w", "https_proxy": "http://a"]) == "socks5://w:1080")
        #expect(try Self.proxy(["ws_proxy": "http://w", "http_proxy": "http://d"], secure: false) == "http://w:1080")
    }

    @Test("a proxy this client cannot use is an error, not a direct connection; credentials are not shown")
    func unusable() throws {
        for value in ["https://user:pw@secure-proxy:443", "socks4://old:1080"] {
            let error = #expect(throws: BLIPProxyError.self) { try Self.proxy(["all_proxy": value]) }
            #expect(error.map { !"\($0)".contains("pw") } == true)
        }
    }

    @Test("no_proxy: *, names and their subdomains, addresses, CIDR ranges, ports")
    func noProxy() throws {
        func bypassed(_ noProxy: String, _ host: String, port: Int = 4984) throws -> Bool {
            try Self.proxy(["all_proxy": "http://p:3128", "no_proxy": noProxy], host: host, port: port) == nil
        }
        #expect(try bypassed("*", "anything.example"))
        #expect(try bypassed(" * ", "anything.example"))
        #expect(try !bypassed("example.org,*", "anything.example"), "* counts only alone, as in curl")
        #expect(try bypassed("example.org example.com", "sync.example.com"), "blanks separate too")
        #expect(try bypassed("example.com.", "sync.example.com."))
        #expect(try bypassed("example.com", "sync.example.com"))
        #expect(try bypassed(".example.com", "sync.example.com"))
        #expect(try bypassed("example.com", "EXAMPLE.com"))
        #expect(try !bypassed("example.com", "badexample.com"))
        #expect(try !bypassed("sync.example.com", "example.com"))
        #expect(try bypassed("localhost, 10.0.0.0/8 ,::1", "10.1.2.3"))
        #expect(try bypassed("localhost,10.0.0.0/8,::1", "::1"))
        #expect(try !bypassed("10.0.0.0/8", "11.1.2.3"))
        #expect(try bypassed("192.168.1.7", "192.168.1.7"))
        #expect(try !bypassed("192.168.1.7", "192.168.1.8"))
        #expect(try bypassed("fd00::/8", "fd12::1"))
        #expect(try !bypassed("fd00::/8", "fe80::1"))
        #expect(try bypassed("example.com:4984", "sync.example.com"))
        #expect(try !bypassed("example.com:443", "sync.example.com"))
        #expect(try bypassed("[::1]:4984", "::1"))
        #expect(try !bypassed("[::1]:443", "::1"))
        #expect(try !bypassed("", "sync.example.com"))
    }

    @Test(
        "opted in, the client goes through the environment's proxy, and straight to a no_proxy host",
        .enabled(if: MicroSocks.isAvailable, "needs microsocks (.ci/setup.sh)"),
        .timeLimit(.minutes(2))
    )
    func client() async throws {
        try await withServer { server in
            try await MicroSocks.with(credentials: ("alice", "s3cret")) { proxy in
                var configuration = BLIPWebSocketClient.Configuration()
                configuration.heartbeatInterval = nil
                let target = "ws://127.0.0.1:\(server.port)/"
                // A wrong password shows that the proxy was used.
                configuration.proxyEnvironment = ["all_proxy": proxy.url(user: "alice", password: "wrong")]
                let error = await #expect(throws: BLIPProxyError.self) {
                    try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { _ in }
                }
                #expect(error?.code == .authenticationRequired)
                configuration.proxyEnvironment = ["all_proxy": proxy.url(user: "alice", password: "s3cret")]
                try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                }
                // no_proxy: straight to the server, so the wrong password does not matter.
                configuration.proxyEnvironment = [
                    "all_proxy": proxy.url(user: "alice", password: "wrong"), "no_proxy": "127.0.0.0/8",
                ]
                try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                }
                // Not opted in: the environment is not read.
                configuration.proxyEnvironment = nil
                try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                }
            }
        }
    }
}
