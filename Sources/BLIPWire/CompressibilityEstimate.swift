#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// A cheap guess, made before any byte enters the deflate stream, of whether data is worth compressing.
///
/// Deflating random or already-compressed bytes costs as much CPU as deflating text and gains nothing.
/// In BLIP 3 the decision has to come before compressing: data fed to the shared deflate stream must be
/// sent compressed, or the peer's inflater and our deflater stop agreeing. So the estimate looks at the
/// order-0 entropy of a sample of at most ``sampleSize`` bytes: random bytes measure close to 8 bits per
/// byte, JSON and text 4.5 to 6.
package enum BLIPCompressibility {
    /// Bytes sampled (spread evenly over the data).
    package static let sampleSize = 1024
    /// Estimated bits per byte at or above which data is sent uncompressed. A 1024-byte sample of random
    /// bytes measures about 7.8; base64 text about 6.
    package static let entropyThreshold = 7.2

    /// Estimated entropy, in bits per byte, of an evenly spread sample of `bytes`.
    package static func estimatedEntropy(of bytes: UnsafeRawBufferPointer) -> Double {
        let count = bytes.count
        guard count > 0 else { return 0 }
        let samples = min(count, sampleSize)
        let stride = count / samples
        return withUnsafeTemporaryAllocation(of: UInt16.self, capacity: 256) { histogram in
            histogram.initialize(repeating: 0)
            var index = 0
            for _ in 0..<samples {
                histogram[Int(bytes[index])] &+= 1
                index &+= stride
            }
            // H = log2(n) - (1/n) * sum(c * log2(c))
            var sum = 0.0
            for value in histogram where value > 1 {
                let c = Double(value)
                sum += c * log2(c)
            }
            let n = Double(samples)
            return log2(n) - sum / n
        }
    }

    /// Whether `bytes` look worth deflating. Short data is always tried: the sample would say little.
    package static func isWorthCompressing(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard bytes.count >= 256 else { return true }
        return self.estimatedEntropy(of: bytes) < self.entropyThreshold
    }
}
