internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionCore {
    /// A frame from the transport.
    func received(_ frame: ByteBuffer) {
        var effects = Effects()
        self.metrics.bytesReceived.increment(by: Int64(frame.readableBytes))
        self.state.withLockedValue { $0.receivedFrame(frame, effects: &effects) }
        self.perform(&effects)
        if self.tracesFrames {
            self.logger.trace("received frame", metadata: ["blip.length": "\(frame.readableBytes)"])
        }
    }

}
