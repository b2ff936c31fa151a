#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (Fixtures/fuzz/corpus/<target>/) from the fixtures.

  frames      a dialect byte (0 BLIP 3, 1 BLIP 2, 2 seed), then frames as 16-bit little-endian length + bytes:
              one file per direction of every captured scenario, and one per single-frame vector.
  properties  a dialect byte, then a length-prefixed property block: every property vector.
  engine      scripts for the engine target (see Sources/BLIPFuzz/EngineTarget.swift for the opcodes):
              ordinary exchanges in each dialect, and the captured client frames fed to the engine as a
              server would receive them.
  connection  choices for the connection-pair session (Sources/BLIPPeerHarness/ConnectionPairSimulation.swift):
              any bytes make a session, so the seeds are seeded random runs of several lengths.

Run from anywhere: python3 Fixtures/fuzz/make-corpus.py
"""
import json
import os
import random
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.dirname(HERE)
DIALECTS = {"blip3": 0, "blip2": 1, "seed": 2}
CAPTURES = [("go-blip", "blip3"), ("litecore", "blip3"), ("go-blip-d3", "blip2")]


def record(data):
    assert len(data) <= 0xFFFF
    return struct.pack("<H", len(data)) + data


def write(target, name, data):
    folder = os.path.join(HERE, "corpus", target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def captured_frames():
    """(capture, scenario folder, direction, dialect, [frame bytes]) for every scenario direction."""
    for capture, dialect in CAPTURES:
        root = os.path.join(FIXTURES, capture)
        for entry in sorted(os.listdir(root)):
            folder = os.path.join(root, entry)
            if not os.path.isdir(folder):
                continue
            files = sorted(f for f in os.listdir(folder) if f.endswith(".bin"))
            for direction in ("c2s", "s2c"):
                frames = [open(os.path.join(folder, f), "rb").read() for f in files if f"-{direction}-" in f]
                if frames:
                    yield capture, entry, direction, dialect, frames


def frames_corpus():
    for capture, entry, direction, dialect, frames in captured_frames():
        data = bytes([DIALECTS[dialect]]) + b"".join(record(f) for f in frames)
        write("frames", f"{capture}-{entry}-{direction}", data)
    vectors = json.load(open(os.path.join(FIXTURES, "vectors", "frames.json")))
    for index, case in enumerate(vectors["cases"]):
        frame = bytes.fromhex(case["hex"].replace(" ", ""))
        write("frames", f"vector-{index:02d}", bytes([DIALECTS[case["dialect"]]]) + record(frame))


def properties_corpus():
    vectors = json.load(open(os.path.join(FIXTURES, "vectors", "properties.json")))
    for index, case in enumerate(vectors["cases"]):
        block = bytes.fromhex(case["hex"].replace(" ", ""))
        for dialect in case.get("dialects", ["blip3"]):
            write("properties", f"vector-{index:02d}-{dialect}", bytes([DIALECTS[dialect]]) + block)


# Engine target opcodes (EngineTarget.step): the op byte is taken modulo 16.
LOCAL_REQUEST, PEER_REQUEST, LOCAL_ANSWER, PEER_ANSWER = 0, 2, 3, 4
PUMP_LOCAL, PUMP_PEER, TO_LOCAL, TO_PEER, TAMPER, CONSUME, APPEND, TIME = 5, 7, 9, 11, 12, 13, 14, 15


def request(op, flags, size):
    # flags: 1 urgent, 2 compressed, 4 no-reply, 8 streams reply, 0x40 streamed body, 0x80 size x16
    return bytes([op, flags]) + struct.pack("<H", size) + bytes([0])  # then the profile choice


def pump(op, frames=7):
    return bytes([op, frames])


def exchange_rounds(rounds):
    step = pump(PUMP_LOCAL) + pump(TO_PEER) + pump(PUMP_PEER) + pump(TO_LOCAL) + bytes([TIME]) + b"\x10\x00\x00"
    return step * rounds


def engine_corpus():
    for dialect, code in DIALECTS.items():
        header = bytes([code, 0])
        # A request, its reply, both ways.
        script = request(LOCAL_REQUEST, 0, 100) + exchange_rounds(2)
        script += bytes([PEER_ANSWER, 0]) + struct.pack("<H", 300) + bytes([0, 1, 0]) + exchange_rounds(2)
        write("engine", f"{dialect}-request-reply", header + script)
        # Compressed, urgent and no-reply requests in both directions, answered by the engine under test.
        script = request(LOCAL_REQUEST, 2, 5000) + request(LOCAL_REQUEST, 1, 50) + request(LOCAL_REQUEST, 4, 10)
        script += request(PEER_REQUEST, 2, 4000) + exchange_rounds(3)
        script += bytes([LOCAL_ANSWER, 0, 1]) + struct.pack("<H", 2000) + bytes([0, 1]) + exchange_rounds(3)
        write("engine", f"{dialect}-mixed", header + script)
        # A large message (flow control and ACKs), then a streamed body.
        script = request(LOCAL_REQUEST, 0x80, 20000) + exchange_rounds(40)
        script += request(LOCAL_REQUEST, 0x40, 0) + bytes([APPEND, 0, 0]) + struct.pack("<H", 60000)
        script += bytes([APPEND, 0, 1]) + struct.pack("<H", 100) + exchange_rounds(4)
        write("engine", f"{dialect}-large-and-streamed", header + script)
        # Manual consumption (options bit 2) of the peer's large request.
        script = request(PEER_REQUEST, 0x80, 20000) + exchange_rounds(10) + bytes([CONSUME, 1, 0, 0xFF, 0xFF])
        script += exchange_rounds(30)
        write("engine", f"{dialect}-manual-consumption", bytes([code, 2]) + script)
    # The captured client frames, fed to the engine under test as a server receives them.
    for capture, entry, direction, dialect, frames in captured_frames():
        if direction != "c2s":
            continue
        script = b"".join(bytes([TAMPER, 5]) + record(f) + pump(TO_LOCAL) for f in frames)
        write("engine", f"{capture}-{entry}", bytes([DIALECTS[dialect], 0]) + script + pump(PUMP_LOCAL))


def connection_corpus():
    generator = random.Random(43)
    for index in range(12):
        size = generator.choice([64, 200, 600, 1500, 3000])
        write("connection", f"seed-{index:02d}", bytes(generator.randrange(256) for _ in range(size)))


if __name__ == "__main__":
    frames_corpus()
    properties_corpus()
    engine_corpus()
    connection_corpus()
