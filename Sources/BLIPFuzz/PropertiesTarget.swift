internal import BLIPWire
internal import NIOCore

/// Fuzz target (c): the property-block decoder. Whatever decodes must encode again and decode to the same
/// properties (in the same order); whatever fails must fail with a typed error inside the block.
///
/// Input: a dialect byte, then a length-prefixed property block as it starts a message.
enum PropertiesTarget {
    static func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        var input = FuzzInput(data)
        let dialect = BLIPDialect.allCases[input.choice(BLIPDialect.allCases.count)]
        var buffer = ByteBuffer(bytes: input.rest())
        let total = buffer.readableBytes
        let properties: BLIPProperties
        do {
            properties = try BLIPPropertyCodec.read(from: &buffer, dialect: dialect, maximumSize: 64 * 1024)
        } catch {
            if let offset = error.offset, offset < 0 || offset > total {
                throw FuzzFailure("error offset \(offset) outside \(total) bytes: \(error)")
            }
            return
        }
        var encoded = ByteBuffer()
        do {
            try BLIPPropertyCodec.write(properties, dialect: dialect, maximumSize: 64 * 1024, to: &encoded)
        } catch {
            throw FuzzFailure("decoded \(properties) but cannot encode it again: \(error)")
        }
        let again: BLIPProperties
        do {
            again = try BLIPPropertyCodec.read(from: &encoded, dialect: dialect, maximumSize: 64 * 1024)
        } catch {
            throw FuzzFailure("re-encoded \(properties) does not decode: \(error)")
        }
        guard again == properties, encoded.readableBytes == 0 else {
            throw FuzzFailure("round trip changed \(properties) into \(again)")
        }
    }
}
