#!/usr/bin/env python3
"""Times WebSocket handshakes against a server from a process of its own (so that the timing does not
include the test process's own scheduling): COUNT times, connect, send an upgrade request, read the
response head, hang up; prints one line per handshake with its time in milliseconds, or "failed: why".

usage: handshake_timer.py PORT COUNT
"""
import sys
import time

from websocket_upgrade import upgrade


def handshake(port):
    started = time.monotonic()
    upgrade(port, timeout=30).close()
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
