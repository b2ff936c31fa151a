import BLIPEngine
import Foundation
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// How a connection ended, as both sides and every waiting caller see it: code, reason and who closed.
@Suite("Close status", .timeLimit(.minutes(3)))
struct CloseStatusTests {
    /// A router whose `hold` handler never answers until the connection goes, so that requests are pending.
    static func holdingRouter() -> BLIPRouter {
        var router = standardRouter()
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        return router
    }

    @Test("an application code and reason reach the peer; pending requests on both sides carry the status")
    func applicationCode() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverEnd, router: Self.holdingRouter())
        let client = BLIPConnection(transport: clientEnd, router: Self.holdingRouter())
        async let serverRun = server.run()
        async let clientRun = client.run()

        // One request pending each way.
        let fromClient = Task { try await client.sendRequest(BLIPRequest(profile: "hold")) }
        let fromServer = Task { try await server.sendRequest(BLIPRequest(profile: "hold")) }
        try await waitUntil { server.statistics.framesReceived >= 1 && client.statistics.framesReceived >= 1 }

        let status = await server.close(code: 4001, reason: "session expired")
        #expect(status.code == 4001 && status.reason == "session expired" && status.initiator == .local)
        #expect(!status.isNormal)

        let serverError = await #expect(throws: BLIPConnectionError.self) { try await fromServer.value }
        #expect(serverError?.code == .connectionClosed)
        #expect(serverError?.closeStatus?.initiator == .local && serverError?.closeStatus?.code == 4001)

        let clientError = await #expect(throws: BLIPConnectionError.self) { try await fromClient.value }
        let peerStatus = try #require(clientError?.closeStatus)
        #expect(peerStatus.code == 4001 && peerStatus.reason == "session expired" && peerStatus.initiator == .peer)
        #expect(clientError?.code == .connectionClosed)

        let ran = await (serverRun, clientRun)
        #expect(ran.0.initiator == .local && ran.1.initiator == .peer && ran.1.code == 4001)
        #expect(client.closeStatus?.code == 4001 && server.closeStatus?.code == 4001)
        #expect(client.core.pendingBookkeeping == 0 && server.core.pendingBookkeeping == 0)
    }

    @Test("a handler can close its own connection with a code")
    func closeFromHandler() async throws {
        var router = BLIPRouter()
        router.register(profile: "logout") { _, context in
            // Not awaited here: the handler's own reply could never go out after the close.
            let connection = context.connection
            Task { await connection.close(code: .policyViolation, reason: "logged out") }
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        // The request fails with the close; the scoped session may then end first and throw the same.
        let error: BLIPConnectionError?
        do {
            error = try await peers.run { connection in
                await #expect(throws: BLIPConnectionError.self) {
                    try await connection.sendRequest(BLIPRequest(profile: "logout"))
                }
            }
        } catch let thrown as BLIPConnectionError {
            error = thrown
        }
        #expect(error?.closeStatus?.code == .policyViolation)
        #expect(error?.closeStatus?.initiator == .peer && error?.closeStatus?.reason == "logged out")
        #expect(peers.serverConnection.closeStatus?.initiator == .local)
    }

    @Test("a normal close is normal on both sides")
    func normalClose() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
        }
        let serverStatus = try #require(peers.serverConnection.closeStatus)
        #expect(serverStatus.isNormal && serverStatus.initiator == .peer && serverStatus.code == .normalClosure)
    }

    @Test("a cut link: the transport failed (1006), with the error behind it")
    func transportFailure() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverEnd, router: Self.holdingRouter())
        let client = BLIPConnection(transport: clientEnd)
        async let serverRun = server.run()
        let pending = Task { try await client.sendRequest(BLIPRequest(profile: "hold")) }
        try await waitUntil { server.statistics.framesReceived >= 1 }
        clientEnd.cut()
        let error = await #expect(throws: BLIPConnectionError.self) { try await pending.value }
        #expect(error?.code == .transportFailed)
        let status = try #require(error?.closeStatus)
        #expect(status.initiator == .transport && status.code == .abnormalClosure && !status.isNormal)
        #expect((status.underlying as? BLIPConnectionError)?.code == .transportFailed)
        #expect(await serverRun.initiator == .transport)
        await client.close()
        #expect(client.closeStatus?.initiator == .transport, "a later close changes nothing")
    }

    @Test("a bad frame from the peer: closed here with 1002, the violation underneath")
    func protocolViolation() async throws {
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport)
        let pending = Task { try await connection.sendRequest(BLIPRequest(profile: "echo")) }
        try await waitUntil { !transport.drain().isEmpty }
        transport.deliver(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF]))
        let error = await #expect(throws: BLIPConnectionError.self) { try await pending.value }
        #expect(error?.code == .protocolViolation)
        let status = try #require(connection.closeStatus)
        #expect(status.initiator == .local && status.code == .protocolError && !status.isTransient)
        #expect((status.underlying as? BLIPConnectionError)?.code == .protocolViolation)
        #expect(error?.closeStatus?.code == .protocolError)
        #expect(transport.closeReasons.map(\.code) == [.protocolError])
    }

    @Test("a reason longer than a close frame holds is cut at a character boundary")
    func longReason() async throws {
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport)
        let reason = String(repeating: "é", count: 100)  // 200 bytes
        let status = await connection.close(code: 4000, reason: reason)
        #expect(status.reason == String(repeating: "é", count: 61))
        #expect(transport.closeReasons.map(\.reason) == [String(repeating: "é", count: 61)])
        #expect(status.initiator == .local && status.code == 4000)
    }

    @Test("which codes an application may send")
    func sendableCodes() {
        for code: BLIPCloseCode in [1000, 1001, 1003, 1008, 1011, 1012, 1013, 1014, 3000, 4000, 4999] {
            #expect(code.isSendable)
        }
        for code: BLIPCloseCode in [0, 999, 1004, 1005, 1006, 1015, 2999, 5000] { #expect(!code.isSendable) }
    }
}

/// Polls `condition` every 5 ms for at most 20 s (a hang, not slowness, fails it).
func waitUntil(_ condition: () -> Bool, sourceLocation: SourceLocation = #_sourceLocation) async throws {
    let deadline = ContinuousClock.now + .seconds(20)
    while !condition() {
        guard ContinuousClock.now < deadline else {
            Issue.record("condition not met within 20 s", sourceLocation: sourceLocation)
            return
        }
        try await Task.sleep(for: .milliseconds(5))
    }
}
