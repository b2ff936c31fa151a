internal import BLIPEngine

/// ``BLIPRouter/HandlerOrder/serial``: handlers start in request-number order (see ``SerialOrder``).
///
/// Every request is recorded when it starts arriving; when it is ready (complete, or settled without a
/// handler) it goes on at once if it is the earliest, and otherwise waits for the earlier ones. What waits
/// counts against the buffer budget as memory only reading can free (see ConnectionCore+Backpressure):
/// reading never pauses for it, and the earliest request is the one let through when ACKs are withheld.
extension ConnectionCore {
    /// A request of the peer's started arriving (its properties are in). One whose profile has no handler
    /// and that will be answered ERR BLIP/404 takes no place: it never needs to wait.
    func orderStarted(_ number: UInt64, route: BLIPRouter.Route?, _ state: inout State) {
        guard self.isSerial else { return }
        switch route {
        case .ping: return  // answered at once, whatever waits
        case nil where self.configuration.unhandledRequests == .respondNotFound: return
        default: state.order.started(number)
        }
    }

    /// Whether a request that is ready now must wait for an earlier one.
    func orderWouldHold(_ number: UInt64, _ state: State) -> Bool {
        guard self.isSerial, state.order.isTracked(number) else { return false }
        return state.order.wouldWait(number, firstAwaitingProperties: state.engine.firstRequestAwaitingProperties)
    }

    /// Hands `item` on now, or when every earlier request has gone.
    func inOrder(
        _ item: SerialOrder.Item,
        number: UInt64,
        charge: Int,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard self.isSerial, state.order.makeReady(number, item, charge: charge) else {
            self.handOn(item, &state, effects: &effects)
            return
        }
        self.releaseInOrder(&state, effects: &effects)
    }

    /// A request that needs no handler (refused, answered by the connection, failed) takes its place.
    func settledInOrder(_ number: UInt64, _ state: inout State, effects: inout Effects) {
        guard self.isSerial else { return }
        self.inOrder(.settled, number: number, charge: 0, &state, effects: &effects)
    }

    /// Hands on every ready request whose turn has come.
    func releaseInOrder(_ state: inout State, effects: inout Effects) {
        guard state.order.hasReadyItems else { return }
        var released = false
        while !state.isClosed,
            let item = state.order.next(firstAwaitingProperties: state.engine.firstRequestAwaitingProperties)
        {
            released = true
            self.handOn(item, &state, effects: &effects)
        }
        // What waited counted as memory only reading frees; now a handler or the application can free it.
        if released { self.updateReading(&state, effects: &effects) }
    }

    private func handOn(_ item: SerialOrder.Item, _ state: inout State, effects: inout Effects) {
        switch item {
        case .work(let work): self.dispatch(work, &state, effects: &effects)
        case .immediate(let work): self.dispatchSynchronous(work, &state, effects: &effects)
        case .deliver(let request): self.deliverUnhandled(request, &state, effects: &effects)
        case .settled: break
        }
    }

    /// Bytes the peer made us hold that only reading more can free: requests waiting for an earlier one to
    /// arrive, with the unread bodies of streamed ones.
    func heldForOrder(_ state: State) -> Int {
        var held = state.order.heldCharge
        for number in state.order.heldStreams {
            held += state.streams[BLIPIncomingID(isRequest: true, number: number)]?.keptBytes ?? 0
        }
        return held
    }
}
