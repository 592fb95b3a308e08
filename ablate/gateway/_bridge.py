"""The loopback port inside the agent's sandbox. The sandbox has its own network namespace (only
its loopback interface), so the agent's HTTP client reaches the gateway through a small relay
started there before the agent: it listens on 127.0.0.1:PORT and copies each connection's bytes
to and from the gateway's Unix socket, bound into the sandbox. It runs with the sandbox's Python in
isolated mode (standard library only): it binds its port, forks a child that serves it for as
long as the sandbox lives, and replaces itself with the agent, which so starts only once the port
is open (and stays the sandbox's main process: when it exits, the sandbox and the relay end).
"""
from __future__ import annotations

import sys

PORT = 18417  # inside the sandbox's own network namespace, so every trial can use the same one
SOCKET = "/run/ablate/gateway.sock"  # where the gateway's socket appears inside

RELAY = r"""
import os, socket, sys, threading
path, port, agent = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(64)
if os.fork():
    srv.close()
    os.execvp(agent[0], agent)
slots = threading.BoundedSemaphore(64)

def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass

def serve(conn):
    try:
        up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            up.connect(path)
        except OSError:
            return
        back = threading.Thread(target=pump, args=(up, conn), daemon=True)
        back.start()
        pump(conn, up)
        back.join()
        up.close()
    finally:
        conn.close()
        slots.release()

while True:
    conn, _ = srv.accept()
    if not slots.acquire(blocking=False):
        conn.close()
        continue
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""


def command(agent: list[str], python: str = sys.executable, socket_path: str = SOCKET, port: int = PORT) -> list[str]:
    """The argv that starts the relay inside the sandbox and then, once its port listens, ``agent``."""
    return [python, "-I", "-S", "-c", RELAY, socket_path, str(port), *agent]
