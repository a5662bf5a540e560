"""A libzmq KV-event publisher for kvstream's interop test, shaped like vLLM's ZmqEventPublisher.

Reads one JSON line on stdin: {"encoding": "map"|"array", "topic": str, "drop": [seq...],
"payloads": [hex...]} where payloads are array-form batches. Re-encodes each batch with
python-msgpack in the requested form, binds a PUB and a replay ROUTER on ephemeral ports, prints
"READY <pub> <router>", waits for "GO", publishes [topic, seq8, payload] for every seq not in
"drop" (dropped ones stay in the replay buffer, like a PUB HWM drop), prints "DONE", and serves
replays until "QUIT". Replies use the current vLLM form (with topic) for "map" and the older
form (no topic) for "array".
"""
import json
import sys
import threading
import time

import msgpack
import zmq

STORED = ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
          "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"]
REMOVED = ["block_hashes", "medium", "group_idx"]
END_SEQ = (2**64 - 1).to_bytes(8, "big")


def to_map(ev):
    tag = ev[0]
    names = {"BlockStored": STORED, "BlockRemoved": REMOVED}.get(tag, [])
    out = {"type": tag}
    for name, value in zip(names, ev[1:]):
        out[name] = value
    return out


def main():
    spec = json.loads(sys.stdin.readline())
    batches = []
    for h in spec["payloads"]:
        ts, events, rank = msgpack.unpackb(bytes.fromhex(h), raw=False)
        if spec["encoding"] == "map":
            events = [to_map(e) for e in events]
        batches.append(msgpack.packb([ts, events, rank], use_bin_type=True))
    topic = spec["topic"].encode()
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 100000)
    pub_port = pub.bind_to_random_port("tcp://127.0.0.1")
    router = ctx.socket(zmq.ROUTER)
    router_port = router.bind_to_random_port("tcp://127.0.0.1")
    print("READY", pub_port, router_port, flush=True)

    commands = []
    cond = threading.Condition()

    def read_stdin():
        for line in sys.stdin:
            with cond:
                commands.append(line.strip())
                cond.notify_all()
        with cond:
            commands.append("QUIT")
            cond.notify_all()

    threading.Thread(target=read_stdin, daemon=True).start()

    def serve_replay(timeout_ms):
        if not router.poll(timeout_ms):
            return
        frames = router.recv_multipart()
        if len(frames) != 3 or frames[1] != b"" or len(frames[2]) != 8:
            return
        start = int.from_bytes(frames[2], "big")
        ident = frames[0]
        for seq, payload in enumerate(batches[:published[0]]):
            if seq < start:
                continue
            if spec["encoding"] == "map":
                router.send_multipart([ident, b"", topic, seq.to_bytes(8, "big"), payload])
            else:
                router.send_multipart([ident, b"", seq.to_bytes(8, "big"), payload])
        if spec["encoding"] == "map":
            router.send_multipart([ident, b"", b"", END_SEQ, b""])
        else:
            router.send_multipart([ident, b"", END_SEQ, b""])

    published = [0]
    while True:
        with cond:
            if "GO" in commands or "QUIT" in commands:
                break
        serve_replay(20)
    drop = set(spec["drop"])
    for seq, payload in enumerate(batches):
        published[0] = seq + 1
        if seq not in drop:
            pub.send_multipart([topic, seq.to_bytes(8, "big"), payload])
        serve_replay(5)
    print("DONE", flush=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        with cond:
            if "QUIT" in commands:
                break
        serve_replay(20)
    pub.close(0)
    router.close(0)
    ctx.term()


if __name__ == "__main__":
    main()
