@_exported public import struct BLIPEngine.BLIPEngineConfiguration
@_exported public import enum BLIPWire.BLIPDialect
@_exported public import struct BLIPWire.BLIPProperties
@_exported public import struct BLIPWire.BLIPProperty
