#!/usr/bin/env python3
"""Times WebSocket handshakes against a server from a process of its own (so that the timing does not
include the test process's own scheduling): COUNT times, connect, send an upgrade request, read the
response head, hang up; prints one line per handshake with its time in milliseconds, or "failed: why".

usage: handshake_timer.py PORT COUNT
"""
import base64
import os
import socket
import sys
import time


def handshake(port):
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
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
                raise OSError("closed during the handshake")
            response += chunk
        if b" 101 " not in response.split(b"\r\n", 1)[0]:
            raise OSError(f"not upgraded: {response[:80]!r}")
        return (time.monotonic() - started) * 1000


def main():
    port, count = int(sys.argv[1]), int(sys.argv[2])
    for _ in range(count):
        try:
            print(f"{handshake(port):.3f}", flush=True)
        except OSError as error:
            print(f"failed: {error}", flush=True)
        time.sleep(0.02)


if __name__ == "__main__":
    main()
