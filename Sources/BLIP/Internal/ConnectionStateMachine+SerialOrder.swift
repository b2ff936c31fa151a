internal import BLIPEngine

/// ``BLIPRouter/HandlerOrder/serial``: handlers start in request-number order (see ``SerialOrder``).
///
/// Every request is recorded when it starts arriving; when it is ready (complete, or settled without a
/// handler) it goes on at once if it is the earliest, and otherwise waits for the earlier ones. What waits
/// counts against the buffer budget as memory only reading can free (see ConnectionStateMachine+Backpressure):
/// reading never pauses for it, and the earliest request is the one let through when ACKs are withheld.
extension ConnectionStateMachine {
    /// A request of the peer's started arriving (its properties are in). One whose profile has no handler
    /// and that will be answered ERR BLIP/404 takes no place: it never needs to wait.
    mutating func orderStarted(_ number: UInt64, route: BLIPRouter.Route?) {
        guard self.isSerial else { return }
        switch route {
        case .ping: return  // answered at once, whatever waits
        case nil where self.configuration.unhandledRequests == .respondNotFound: return
        default: self.order.started(number)
        }
    }

    /// Whether a request that is ready now must wait for an earlier one.
    func orderWouldHold(_ number: UInt64) -> Bool {
        guard self.isSerial, self.order.isTracked(number) else { return false }
        return self.order.wouldWait(number, firstAwaitingProperties: self.engine.firstRequestAwaitingProperties)
    }

    /// Hands `item` on now, or when every earlier request has gone.
    mutating func inOrder(
        _ item: SerialOrder.Item,
        number: UInt64,
        charge: Int,
        effects: inout Effects
    ) {
        guard self.isSerial, self.order.makeReady(number, item, charge: charge) else {
            self.handOn(item, effects: &effects)
            return
        }
        self.releaseInOrder(effects: &effects)
    }

    /// A request that needs no handler (refused, answered by the connection, failed) takes its place.
    mutating func settledInOrder(_ number: UInt64, effects: inout Effects) {
        guard self.isSerial else { return }
        self.inOrder(.settled, number: number, charge: 0, effects: &effects)
    }

    /// Hands on every ready request whose turn has come.
    mutating func releaseInOrder(effects: inout Effects) {
        guard self.order.hasReadyItems else { return }
        var released = false
        while !self.isClosed,
            let item = self.order.next(firstAwaitingProperties: self.engine.firstRequestAwaitingProperties)
        {
            released = true
            self.handOn(item, effects: &effects)
        }
        // What waited counted as memory only reading frees; now a handler or the application can free it.
        if released { self.updateReading(effects: &effects) }
    }

    fileprivate mutating func handOn(_ item: SerialOrder.Item, effects: inout Effects) {
        switch item {
        case .work(let work): self.dispatch(work, effects: &effects)
        case .immediate(let work): self.dispatchSynchronous(work, effects: &effects)
        case .deliver(let request): self.deliverUnhandled(request, effects: &effects)
        case .settled: break
        }
    }

    /// Bytes the peer made us hold that only reading more can free: requests waiting for an earlier one to
    /// arrive, with the unread bodies of streamed ones.
    func heldForOrder() -> Int {
        var held = self.order.heldCharge
        for number in self.order.heldStreams {
            held += self.streams[BLIPIncomingID(isRequest: true, number: number)]?.keptBytes ?? 0
        }
        return held
    }
}
