# A real libzmq subscriber (pyzmq + msgpack) for publisher_test.go: receives live batches, then asks
# for a replay from sequence 1 on a DEALER socket, and prints one JSON line per frame set.
import json, sys
import msgpack, zmq

pub, rep, topic, want = sys.argv[1], sys.argv[2], sys.argv[3].encode(), int(sys.argv[4])
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
sub.RCVTIMEO = 10000
sub.connect(pub)
print(json.dumps({"ready": True}), flush=True)
for _ in range(want):
    frames = sub.recv_multipart()
    assert len(frames) == 3, frames
    assert frames[0] == topic, frames[0]
    seq = int.from_bytes(frames[1], "big")
    ts, events, rank = msgpack.unpackb(frames[2])
    print(json.dumps({"live": seq, "rank": rank, "types": [e["type"] for e in events],
                      "hashes": [e.get("block_hashes") for e in events]}), flush=True)
d = ctx.socket(zmq.DEALER)
d.RCVTIMEO = 10000
d.connect(rep)
d.send_multipart([b"", (1).to_bytes(8, "big")])
while True:
    frames = d.recv_multipart()
    assert frames[0] == b"" and len(frames) == 4, frames
    seq = int.from_bytes(frames[2], "big")
    if frames[3] == b"":
        assert frames[1] == b"" and seq == 2**64 - 1
        print(json.dumps({"end": True}), flush=True)
        break
    assert frames[1] == topic
    ts, events, rank = msgpack.unpackb(frames[3])
    print(json.dumps({"replay": seq, "types": [e["type"] for e in events]}), flush=True)
