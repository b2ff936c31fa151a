#!/usr/bin/env python3
"""A WebSocket peer that floods a server with empty masked pings: it upgrades, prints "flooding", then writes
pings as fast as the socket takes them (and reads whatever comes back) until SECONDS have passed or it is
killed. A separate process, so that the flood does not share the test's threads.

usage: ping_flood.py PORT SECONDS
"""
import sys
import threading
import time

from websocket_upgrade import upgrade


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    try:
        sock = upgrade(port)
    except OSError as error:
        sys.exit(str(error))

    def drain():
        try:
            while sock.recv(1 << 20):
                pass
        except OSError:
            pass

    threading.Thread(target=drain, daemon=True).start()
    ping = bytes([0x89, 0x80, 1, 2, 3, 4])  # FIN + ping, masked, empty
    batch = ping * 65536
    print("flooding", flush=True)
    deadline = time.monotonic() + seconds
    sent = 0
    while time.monotonic() < deadline:
        try:
            sock.sendall(batch)
        except OSError as error:
            print(f"flood ended: {error}", flush=True)
            break
        sent += len(batch)
    print(f"sent {sent} bytes", flush=True)


if __name__ == "__main__":
    main()
