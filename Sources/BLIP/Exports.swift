@_exported public import enum BLIPWire.BLIPDialect
@_exported public import struct BLIPWire.BLIPProperties
@_exported public import struct BLIPWire.BLIPProperty
// Bodies are NIO byte buffers: `import BLIP` alone makes them usable (as Hummingbird does).
@_exported public import struct NIOCore.ByteBuffer
@_exported public import struct NIOCore.ByteBufferAllocator
