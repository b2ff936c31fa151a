import NIOCore

@testable import BLIPWire

extension BLIPFrameEncoder {
    /// Frames every byte of `data` as request `number`, in frames of at most `frameSize` bytes, and returns
    /// them one after the other.
    func allFrames(of data: inout BLIPMessageData, number: UInt64, frameSize: Int) throws -> ByteBuffer {
        var output = ByteBuffer()
        repeat {
            _ = try self.encodeFrame(
                BLIPFrameHeader(messageNumber: number, type: .request, flags: []),
                data: &data,
                endOfMessage: true,
                maximumFrameSize: frameSize,
                into: &output
            )
        } while data.readableBytes > 0
        return output
    }
}
