#!/usr/bin/env python3
"""A WebSocket peer that floods a server with empty masked pings: it upgrades, prints "flooding", then writes
pings as fast as the socket takes them (and reads whatever comes back) until SECONDS have passed or it is
killed. A separate process, so that the flood does not share the test's threads.

usage: ping_flood.py PORT SECONDS
"""
import base64
import os
import socket
import sys
import threading
import time


def main():
    port, seconds = int(sys.argv[1]), float(sys.argv[2])
    sock = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3\r\n\r\n"
        ).encode()
    )
    response = b""
    while b"\r\n\r\n" not in response:
        chunk = sock.recv(4096)
        if not chunk:
            sys.exit("closed during the handshake")
        response += chunk
    if b" 101 " not in response.split(b"\r\n", 1)[0]:
        sys.exit(f"not upgraded: {response!r}")

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
