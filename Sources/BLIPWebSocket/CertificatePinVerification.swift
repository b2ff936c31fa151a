internal import Crypto
internal import NIOCore
internal import NIOSSL
internal import SwiftASN1
internal import X509

/// Checks a server's certificates against pins (SHA-256 of a certificate's DER form), in place of NIOSSL's
/// verification. A pinned leaf is accepted as it is: the certificate is known exactly, whoever signed it.
/// A pinned certificate further up the presented chain becomes the only trust anchor: the chain from the
/// leaf up to it must verify (signatures, dates, key usage, and the server's name or address), with
/// swift-certificates; no other root is trusted. So pinning a CA survives the renewal of the leaf, and a
/// chain that merely includes a copy of the pinned certificate does not pass.
struct CertificatePinVerification: Sendable {
    var leafPin: [UInt8]?
    var chainPins: Set<[UInt8]>
    /// The name (or address) the leaf must be for when a chain pin decides.
    var serverName: String

    func verify(_ presented: [NIOSSLCertificate], promise: EventLoopPromise<NIOSSLVerificationResult>) {
        let ders = presented.compactMap { try? $0.toDERBytes() }
        let hashes = ders.map { Array(SHA256.hash(data: $0)) }
        guard ders.count == presented.count, let leafHash = hashes.first else { return promise.succeed(.failed) }
        if leafHash == self.leafPin || self.chainPins.contains(leafHash) {
            return promise.succeed(.certificateVerified)
        }
        guard hashes.contains(where: self.chainPins.contains),
            let certificates = try? ders.map({ try Certificate(derEncoded: $0) })
        else { return promise.succeed(.failed) }
        let anchors = zip(certificates, hashes).filter { self.chainPins.contains($0.1) }.map(\.0)
        let isAddress = (try? SocketAddress(ipAddress: self.serverName, port: 0)) != nil
        let serverName = self.serverName
        Task {
            var verifier = Verifier(rootCertificates: CertificateStore(anchors)) {
                RFC5280Policy()
                ServerIdentityPolicy(
                    serverHostname: isAddress ? nil : serverName,
                    serverIP: isAddress ? serverName : nil
                )
            }
            let result = await verifier.validate(
                leaf: certificates[0],
                intermediates: CertificateStore(certificates.dropFirst())
            )
            switch result {
            case .validCertificate: promise.succeed(.certificateVerified)
            case .couldNotValidate: promise.succeed(.failed)
            }
        }
    }
}
