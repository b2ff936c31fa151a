package import NIOCore

/// A seed or BLIP 2 message body gzipped ahead of framing.
///
/// Those dialects gzip a compressed message's body whole, in a stream of its own, so nothing of the
/// connection's state is needed to do it. A sender with a large body does it before it takes the
/// connection's lock (``BLIPFrameEncoder`` would otherwise do it when the message is queued, under that
/// lock, where a megabyte's gzip holds up every other operation of the connection for milliseconds). The
/// bytes are the same either way.
package struct BLIPGzippedBody: Sendable {
    /// The body as it goes on the wire: its gzip, or the body itself when gzip would not pay.
    package var wireBody: ByteBuffer
    /// What gzipping it did: whether the frames carry the compressed flag, and the byte counts.
    package var outcome: BLIPFrameEncoder.GzipOutcome

    /// Gzips `body` as ``BLIPFrameEncoder`` with `configuration` would (a new zlib stream: a body large
    /// enough to be worth it makes that cost small beside its compression).
    package init(gzipping body: ByteBuffer, configuration: BLIPFrameEncoder.Configuration) throws(BLIPWireError) {
        let compressor = try GzipBodyCompressor(level: configuration.compressionLevel)
        var wireBody = ByteBuffer()
        wireBody.reserveCapacity(body.readableBytes / 2 + 64)
        self.outcome = try BLIPFrameEncoder.writeGzipped(
            body,
            compressor: compressor,
            skipsIncompressibleData: configuration.skipsIncompressibleData,
            into: &wireBody
        )
        self.wireBody = wireBody
    }
}
