/// An invariant a fuzz target found broken. Under libFuzzer it becomes a crash, which libFuzzer saves as
/// an input to replay; in a normal build (corpus replay, tests) it is reported.
struct FuzzFailure: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
