#!/usr/bin/env python3
"""A TCP relay that holds every chunk it reads for a fixed time before passing it on, each way: a link with a
longer round trip (2 x DELAY_MS more) where the kernel has no netem. Bandwidth is not limited. Runs until
killed; prints "listening" once it accepts.

usage: delay_relay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS
"""
import asyncio
import sys
import time


async def forward(source, sink, delay):
    """Reads from source and writes each chunk to sink `delay` seconds after it arrived, in order."""
    pending = asyncio.Queue()

    async def reader():
        while True:
            chunk = await source.read(65536)
            pending.put_nowait((time.monotonic() + delay, chunk))
            if not chunk:
                return

    async def writer():
        while True:
            due, chunk = await pending.get()
            late = due - time.monotonic()
            if late > 0:
                await asyncio.sleep(late)
            if not chunk:
                sink.close()
                return
            sink.write(chunk)
            await sink.drain()

    await asyncio.gather(reader(), writer(), return_exceptions=True)
    sink.close()


async def main(listen_host, listen_port, target_host, target_port, delay_ms):
    delay = delay_ms / 1000.0

    async def accepted(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            forward(client_reader, server_writer, delay),
            forward(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(accepted, listen_host, listen_port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])))
