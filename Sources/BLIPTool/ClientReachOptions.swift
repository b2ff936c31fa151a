internal import ArgumentParser
internal import BLIPWebSocket
internal import Foundation

/// How `request` and `bench` reach a server besides its URL: whom to trust, the certificate to present, and
/// a proxy. One group, so that both commands take and check them alike.
struct ClientReachOptions: ParsableArguments {
    @OptionGroup var tls: ClientTLSOptions
    @Option(
        help: """
            Reach the server through this proxy: http://[USER:PASS@]HOST[:PORT] (CONNECT tunnel) or \
            socks5://[USER:PASS@]HOST[:PORT] (the proxy resolves the server's name).
            """
    )
    var proxy: String?
    @Flag(help: "Without --proxy, take the proxy from https_proxy, http_proxy, all_proxy and no_proxy, as curl does.")
    var proxyFromEnvironment = false

    func validate() throws {
        if let proxy = self.proxy, BLIPProxy(url: proxy) == nil {
            throw ValidationError("--proxy takes http:// or socks5://[USER:PASS@]HOST[:PORT], not '\(proxy)'")
        }
    }

    func apply(to configuration: inout BLIPWebSocketClient.Configuration) {
        self.tls.apply(to: &configuration.tls)
        configuration.proxy = self.proxy.flatMap(BLIPProxy.init(url:))
        if self.proxyFromEnvironment { configuration.proxyEnvironment = ProcessInfo.processInfo.environment }
    }
}

/// Whom a client trusts for wss://, and the certificate it presents: `request`, `bench` and the upstream
/// side of `proxy`.
struct ClientTLSOptions: ParsableArguments {
    @Option(help: "PEM file of certificates to trust for wss://.") var trustPem: String?
    @Option(help: "PEM certificate chain this client presents when the server asks (mutual TLS).")
    var tlsClientCert: String?
    @Option(help: "PEM private key of --tls-client-cert.") var tlsClientKey: String?
    @Option(help: "Name to send in SNI and to check the server's certificate against, instead of the URL's host.")
    var tlsServerName: String?

    func validate() throws {
        if (self.tlsClientCert == nil) != (self.tlsClientKey == nil) {
            throw ValidationError("--tls-client-cert and --tls-client-key go together")
        }
    }

    func apply(to tls: inout BLIPWebSocketClient.TLS) {
        if let trust = self.trustPem { tls.trustRoots = .pemFile(trust) }
        if let certificate = self.tlsClientCert, let key = self.tlsClientKey {
            tls.clientCertificate = .pemFiles(certificateChainPath: certificate, privateKeyPath: key)
        }
        tls.serverName = self.tlsServerName
    }
}
