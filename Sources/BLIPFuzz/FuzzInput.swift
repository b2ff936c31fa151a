/// The fuzzer's bytes read as a script: small integers, choices and byte runs taken from the front. Reading
/// past the end yields zeros and empty runs, so every input is a complete script.
struct FuzzInput {
    private let bytes: UnsafeRawBufferPointer
    private var offset = 0

    init(_ bytes: UnsafeRawBufferPointer) {
        self.bytes = bytes
    }

    var isAtEnd: Bool { self.offset >= self.bytes.count }
    var remaining: Int { max(0, self.bytes.count - self.offset) }

    mutating func byte() -> UInt8 {
        guard self.offset < self.bytes.count else { return 0 }
        defer { self.offset += 1 }
        return self.bytes[self.offset]
    }

    /// A little-endian 16-bit number.
    mutating func uint16() -> Int {
        Int(self.byte()) | Int(self.byte()) << 8
    }

    mutating func choice(_ count: Int) -> Int {
        Int(self.byte()) % count
    }

    mutating func bool() -> Bool {
        self.byte() & 1 == 1
    }

    /// The next `count` bytes (fewer at the end of the input).
    mutating func bytes(_ count: Int) -> UnsafeRawBufferPointer {
        let end = min(self.bytes.count, self.offset + max(0, count))
        defer { self.offset = max(self.offset, end) }
        return UnsafeRawBufferPointer(rebasing: self.bytes[min(self.offset, end)..<end])
    }

    /// A length-prefixed record (16-bit length): how frame sequences are split.
    mutating func record() -> UnsafeRawBufferPointer {
        self.bytes(self.uint16())
    }

    /// Everything not read yet.
    mutating func rest() -> UnsafeRawBufferPointer {
        self.bytes(self.remaining)
    }
}
