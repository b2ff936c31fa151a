internal import BLIPWire

extension BLIPConnectionEngine: CustomDebugStringConvertible {
    /// Every unfinished message in both directions with its flow-control counters: what a stalled
    /// connection is waiting for.
    package var debugDescription: String {
        var lines = ["window \(self.window.size), outbox \(self.outbox.count), pending ACKs \(self.pendingACKs.count)"]
        for state in self.outgoing.values.sorted(by: { $0.id.rawValue < $1.id.rawValue }) {
            var flags: [String] = []
            if state.isQueued { flags.append("queued") }
            if state.isPaused { flags.append("paused") }
            if state.isStarved { flags.append("starved") }
            if state.isHeld { flags.append("held") }
            lines.append(
                "  out \(state.id) \(state.type) #\(state.number): sent \(state.bytesSent), acked "
                    + "\(state.bytesAcknowledged), buffered \(state.data.readableBytes) \(flags.joined(separator: " "))"
            )
        }
        for message in self.incoming.values.sorted(by: { $0.id.number < $1.id.number }) {
            lines.append(
                "  in \(message.id): received \(message.bytesReceived), consumable \(message.bytesConsumable), "
                    + "acked \(message.bytesAcknowledged), body delivered \(message.bodyDelivered) consumed "
                    + "\(message.bodyConsumed)\(message.consumesAutomatically ? " (automatic)" : "")"
            )
        }
        return lines.joined(separator: "\n")
    }
}
