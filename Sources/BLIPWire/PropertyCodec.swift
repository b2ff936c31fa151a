package import NIOCore

/// The property block: a varint byte length (written even when zero), then NUL-terminated UTF-8 strings
/// alternating name, value, name, value. The seed and BLIP 2 dialects abbreviate table strings as tokens.
package enum BLIPPropertyCodec {
    /// LiteCore refuses to build, and treats as fatal on receipt, a block above 100 KiB.
    package static let defaultMaximumSize = 100 * 1024

    /// Bytes `properties` take in `dialect`, varint prefix included, after checking they can be sent.
    package static func encodedLength(
        of properties: BLIPProperties,
        dialect: BLIPDialect,
        maximumSize: Int = defaultMaximumSize
    ) throws(BLIPWireError) -> Int {
        let block = try self.blockLength(of: properties, dialect: dialect, maximumSize: maximumSize)
        return BLIPVarint.encodedLength(of: UInt64(block)) + block
    }

    /// Appends the length-prefixed block to `buffer`; returns the bytes written.
    ///
    /// Refuses strings holding NUL, a block above `maximumSize`, empty strings in the seed dialect, and
    /// one-byte control strings where tokens exist (the peer would read them as tokens).
    @discardableResult
    package static func write(
        _ properties: BLIPProperties,
        dialect: BLIPDialect,
        maximumSize: Int = defaultMaximumSize,
        to buffer: inout ByteBuffer
    ) throws(BLIPWireError) -> Int {
        let block = try self.blockLength(of: properties, dialect: dialect, maximumSize: maximumSize)
        let total = BLIPVarint.encodedLength(of: UInt64(block)) + block
        // One reservation and one pass over raw memory: a write per string and terminator cost five
        // capacity and exclusivity checks per property.
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: total) { target in
            self.encode(properties, blockLength: block, dialect: dialect, into: target)
        }
        return total
    }

    /// Writes the length-prefixed block of properties already checked by ``blockLength(of:dialect:maximumSize:)``
    /// (which gave `blockLength`) at the start of `target`; returns the bytes written.
    static func encode(
        _ properties: BLIPProperties,
        blockLength: Int,
        dialect: BLIPDialect,
        into target: UnsafeMutableRawBufferPointer
    ) -> Int {
        var offset = BLIPVarint.encode(UInt64(blockLength), into: target)
        let end = offset + blockLength
        precondition(end <= target.count, "no room for a property block of \(blockLength) bytes")
        for property in properties {
            offset = self.copyString(property.name, dialect: dialect, into: target, at: offset)
            offset = self.copyString(property.value, dialect: dialect, into: target, at: offset)
        }
        precondition(offset == end, "property block of \(offset) bytes, \(end) expected")
        return end
    }

    /// Reads a length-prefixed block from the front of `buffer` and moves past it. On error the reader
    /// index is unchanged and the offset is relative to it.
    package static func read(
        from buffer: inout ByteBuffer,
        dialect: BLIPDialect,
        maximumSize: Int = defaultMaximumSize
    ) throws(BLIPWireError) -> BLIPProperties {
        let (length, prefixLength) = try buffer.peekBLIPVarint()
        guard length <= UInt64(maximumSize) else {
            throw BLIPWireError(.propertiesTooLarge(length: length, limit: maximumSize), offset: 0)
        }
        let available = buffer.readableBytes - prefixLength
        guard length <= UInt64(available) else {
            throw BLIPWireError(.propertiesLengthExceedsData(declared: length, available: available), offset: 0)
        }
        return try self.readBlock(from: &buffer, prefixLength: prefixLength, length: Int(length), dialect: dialect)
    }

    /// Decodes the block whose prefix (`prefixLength` bytes, giving `length`) is at the reader index, all of
    /// it in `buffer`, and moves past it; error offsets are relative to the reader index.
    static func readBlock(
        from buffer: inout ByteBuffer,
        prefixLength: Int,
        length: Int,
        dialect: BLIPDialect
    ) throws(BLIPWireError) -> BLIPProperties {
        let properties = try buffer.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
            let block = UnsafeRawBufferPointer(rebasing: bytes[prefixLength..<(prefixLength + length)])
            do throws(BLIPWireError) {
                return try self.decodeBlock(block, dialect: dialect)
            } catch {
                throw error.shifted(by: prefixLength)
            }
        }
        buffer.moveReaderIndex(forwardBy: prefixLength + length)
        return properties
    }

    /// Decodes the bytes of a block (without its length prefix).
    package static func decodeBlock(
        _ block: UnsafeRawBufferPointer,
        dialect: BLIPDialect
    ) throws(BLIPWireError) -> BLIPProperties {
        guard let last = block.last else { return BLIPProperties() }
        guard last == 0 else { throw BLIPWireError(.propertiesNotTerminated, offset: block.count - 1) }

        // One pass, building the pairs directly: a small block allocates nothing but the array of pairs.
        var properties: [BLIPProperty] = []
        var pendingName: String?
        var seen: Set<String>?  // only for long blocks, so that duplicate checks stay linear
        var stringCount = 0
        var start = 0
        for index in 0..<block.count where block[index] == 0 {
            let string = try self.decodeString(block, start..<index, dialect: dialect)
            if let name = pendingName {
                properties.append(BLIPProperty(name: name, value: string))
                pendingName = nil
            } else {
                let isDuplicate: Bool
                if properties.count < 8 {
                    isDuplicate = properties.contains { $0.name == string }
                } else {
                    if seen == nil { seen = Set(properties.map(\.name)) }
                    isDuplicate = !seen!.insert(string).inserted
                }
                if isDuplicate { throw BLIPWireError(.duplicatePropertyName(string), offset: start) }
                pendingName = string
            }
            stringCount += 1
            start = index + 1
        }
        guard pendingName == nil else {
            throw BLIPWireError(.oddNumberOfPropertyStrings(stringCount), offset: block.count - 1)
        }
        return BLIPProperties(uniqueProperties: properties)
    }

    /// Decodes the bytes of a block held in a buffer (its readable bytes, without the length prefix).
    package static func decodeBlock(_ block: ByteBuffer, dialect: BLIPDialect) throws(BLIPWireError) -> BLIPProperties {
        try block.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
            try self.decodeBlock(bytes, dialect: dialect)
        }
    }

    // MARK: - Strings

    /// The length of the block of `properties` (without its varint prefix), after checking they can be sent.
    static func blockLength(
        of properties: BLIPProperties,
        dialect: BLIPDialect,
        maximumSize: Int
    ) throws(BLIPWireError) -> Int {
        var length = 0
        for property in properties {
            length += try self.encodedLength(of: property.name, dialect: dialect)
            length += try self.encodedLength(of: property.value, dialect: dialect)
        }
        guard length <= maximumSize else {
            throw BLIPWireError(.propertiesTooLarge(length: UInt64(length), limit: maximumSize))
        }
        return length
    }

    private static func encodedLength(of string: String, dialect: BLIPDialect) throws(BLIPWireError) -> Int {
        let utf8 = string.utf8
        if utf8.isEmpty && !dialect.allowsEmptyPropertyStrings {
            throw BLIPWireError(.emptyPropertyString)
        }
        if dialect.usesPropertyTokens {
            if PropertyTokens.token(for: string) != nil { return 2 }
            if utf8.count == 1, let byte = utf8.first, byte < PropertyTokens.tokenLimit {
                throw BLIPWireError(.propertyStringLooksLikeToken(string))
            }
        }
        if Self.containsNUL(utf8) { throw BLIPWireError(.propertyStringContainsNUL(string)) }
        return utf8.count + 1
    }

    /// Searched as a buffer of bytes where the string has one (native strings do): the generic `contains`
    /// over the UTF-8 view costs about five times as much, and runs for every property of every message sent.
    private static func containsNUL(_ utf8: String.UTF8View) -> Bool {
        utf8.withContiguousStorageIfAvailable { $0.contains(0) } ?? utf8.contains(0)
    }

    /// Copies `string` (or its token) and its terminator to `target` at `offset`; returns the offset after
    /// them. `target` has the room ``encodedLength(of:dialect:)`` counted.
    private static func copyString(
        _ string: String,
        dialect: BLIPDialect,
        into target: UnsafeMutableRawBufferPointer,
        at offset: Int
    ) -> Int {
        if dialect.usesPropertyTokens, let token = PropertyTokens.token(for: string) {
            target[offset] = token
            target[offset + 1] = 0
            return offset + 2
        }
        let utf8 = string.utf8
        let copied = utf8.withContiguousStorageIfAvailable { bytes in
            UnsafeMutableRawBufferPointer(rebasing: target[offset...]).copyMemory(from: UnsafeRawBufferPointer(bytes))
            return bytes.count
        }
        var end = offset
        if let copied {
            end += copied
        } else {
            for byte in utf8 {
                target[end] = byte
                end += 1
            }
        }
        target[end] = 0
        return end + 1
    }

    private static func decodeString(
        _ block: UnsafeRawBufferPointer,
        _ range: Range<Int>,
        dialect: BLIPDialect
    ) throws(BLIPWireError) -> String {
        if range.isEmpty && !dialect.allowsEmptyPropertyStrings {
            throw BLIPWireError(.emptyPropertyString, offset: range.lowerBound)
        }
        if dialect.usesPropertyTokens && range.count == 1 && block[range.lowerBound] < PropertyTokens.tokenLimit {
            let token = block[range.lowerBound]
            guard let string = PropertyTokens.string(for: token) else {
                throw BLIPWireError(.unknownPropertyToken(token), offset: range.lowerBound)
            }
            return string
        }
        // Every string of a block ends with its NUL (`decodeBlock` splits there), so the C-string form of the
        // validating initializer applies: it is the standard library's non-generic UTF-8 check, where the
        // generic `String(validating:as:)` instantiated type metadata for each string (about a microsecond
        // per request of two properties).
        assert(block[range.upperBound] == 0)
        guard let base = block.baseAddress,
            let string = String(
                validatingCString: (base + range.lowerBound).assumingMemoryBound(to: CChar.self)
            )
        else {
            throw BLIPWireError(.invalidUTF8, offset: range.lowerBound)
        }
        return string
    }
}
