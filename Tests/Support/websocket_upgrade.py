"""The client side of a WebSocket upgrade on loopback, for the test peers written in Python."""
import base64
import os
import socket


def upgrade(port, timeout=None):
    """Connects to 127.0.0.1:PORT and upgrades to WebSocket offering BLIP_3+CBMobile_3; returns the socket.
    Raises OSError when the connection closes first or the answer is not 101."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
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
            sock.close()
            raise OSError("closed during the handshake")
        response += chunk
    if b" 101 " not in response.split(b"\r\n", 1)[0]:
        sock.close()
        raise OSError(f"not upgraded: {response[:80]!r}")
    return sock
