"""A 'distributed training' stand-in: replicas meet at MASTER_ADDR:MASTER_PORT (a socket barrier,
what torch.distributed's TCP store does first) and each prints its rank once all have arrived."""

import os
import socket
import sys
import time

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
if rank == 0:
    server = socket.create_server((addr, port))
    peers = []
    while len(peers) < world - 1:
        conn, _ = server.accept()
        peers.append((int(conn.recv(16).decode()), conn))
    for _, conn in peers:
        conn.sendall(b"go")
        conn.close()
    seen = sorted([0] + [r for r, _ in peers])
    print(f"rank 0 of {world} ready; ranks seen {seen}; gpus {gpus}; master port {port}", flush=True)
else:
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.monotonic() > deadline:
                sys.exit("master never answered")
            time.sleep(0.1)
    conn.sendall(str(rank).encode())
    assert conn.recv(16) == b"go"
    print(f"rank {rank} of {world} ready; gpus {gpus}", flush=True)
if len(sys.argv) > 1:
    time.sleep(float(sys.argv[1]))
