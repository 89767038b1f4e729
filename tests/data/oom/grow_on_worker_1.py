"""Worker 1 allocates past its container's memory limit a few seconds after the chief's first
progress line; the chief holds a TCP connection to worker 1 (as a collective would) and fails
once worker 1 is gone, as MultiWorkerMirroredStrategy's all-reduce does. No TensorFlow: the
test is about the pod's end, not about training (tests/kind/test_oom_and_mount.py)."""

import json
import os
import socket
import sys
import time

config = json.loads(os.environ["TF_CONFIG"])
index = config["task"]["index"]
host, port = config["cluster"]["worker"][1].rsplit(":", 1)

if index == 1:
    server = socket.create_server(("", int(port)))
    server.settimeout(60)
    peer, _ = server.accept()  # the chief is there: training "runs"
    print("worker 1: the chief joined; allocating", flush=True)
    time.sleep(3)
    hog = []
    while True:  # written, not only reserved: the pages count against the limit
        hog.append(bytearray(b"x" * (16 << 20)))
        print(f"worker 1: {16 * len(hog)} MiB", flush=True)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            peer = socket.create_connection((host, int(port)), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("worker 1 never came up")
            time.sleep(1)
    progress = {"epoch": 1, "epochs": 1, "step": 5, "steps": 100}
    print("TFLAUNCH_PROGRESS " + json.dumps(progress), flush=True)
    if peer.recv(1) == b"":
        sys.exit("worker 1 closed the connection: lost its peer, as a collective would")
