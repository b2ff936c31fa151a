import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import BLIP

/// An in-memory end that closes, or whose peer closes, before its connection starts must still tell that
/// connection when it does start. Before the fix the end was marked closed with no connection to tell, and
/// the connection that started on it later never ended (a hang seen once under ThreadSanitizer, in the
/// reconnect-loop sample of ClosingAndRetries.md, whose peer closes at once).
@Suite("In-memory ends closed before their connection starts", .timeLimit(.minutes(1)))
struct InMemoryCloseBeforeStartTests {
    /// Waits (bounded) until the link has carried out `side`'s close.
    static func waitUntilClosed(_ transport: BLIPInMemoryTransport, side: Int) async throws {
        for _ in 0..<500 where !transport.link.ends.withLockedValue({ $0[side].closed }) {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(transport.link.ends.withLockedValue { $0[side].closed }, "the close was not carried out")
        // Let the other end's delivery pass run before it has a connection (the case that lost the close).
        try await Task.sleep(for: .milliseconds(50))
    }

    /// Runs a connection on `transport` and returns how it closed, or nil if it had not closed after 20 s
    /// (its run is then left behind: waiting for it would hang the test instead of failing it).
    static func runEnds(_ transport: BLIPInMemoryTransport) async throws -> BLIPCloseStatus? {
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        for _ in 0..<2_000 where connection.core.closeStatus == nil {
            try await Task.sleep(for: .milliseconds(10))
        }
        guard connection.core.closeStatus != nil else { return nil }
        return await running.value
    }

    @Test("the peer closed first: the connection that starts later ends with the peer's close")
    func peerClosedFirst() async throws {
        let (client, server) = BLIPInMemoryTransport.makePair()
        server.close(BLIPCloseReason(.policyViolation, "go away"))
        try await Self.waitUntilClosed(server, side: 1)
        let status = try await Self.runEnds(client)
        #expect(status?.code == .policyViolation && status?.reason == "go away" && status?.initiator == .peer)
    }

    @Test("this end closed first: the connection that starts later ends with that close")
    func closedFirst() async throws {
        let (client, _) = BLIPInMemoryTransport.makePair()
        client.close(BLIPCloseReason(.goingAway, "done"))
        try await Self.waitUntilClosed(client, side: 0)
        let status = try await Self.runEnds(client)
        #expect(status?.code == .goingAway && status?.initiator == .local)
    }

    @Test("the link was cut first: the connections that start later end with the cut")
    func cutFirst() async throws {
        let (client, server) = BLIPInMemoryTransport.makePair()
        client.cut()
        async let clientStatus = Self.runEnds(client)
        async let serverStatus = Self.runEnds(server)
        let (first, second) = try await (clientStatus, serverStatus)
        #expect(first?.initiator == .transport && second?.initiator == .transport)
    }
}
