"""Keeps one sandbox agent alive across exec streams (container backends only).

The sandbox agent (inside/server.py) speaks JSON lines on its stdin/stdout and shuts down when
its stdin closes. On Kubernetes and with docker/podman the stream is an exec session that can
break, so the agent must not be the exec'd process. Instead:

  relay.py serve NAME -- ARGV...   PID 1 of the task container: starts ARGV (the agent) with
                                   pipes and listens on the abstract unix socket NAME; the newest
                                   connection is the client; responses produced while no client
                                   is attached are dropped (a re-sent request id gets the
                                   remembered response from the agent).
  relay.py attach NAME             what each exec stream runs: copies stdin -> socket and
                                   socket -> stdout until either side ends.

Shipped into the sandbox next to server.py; stdlib-only and Python >= 3.8 like the agent.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

BUF = 1 << 16


def _address(name):
    return "\0" + name  # abstract namespace: no file to delete, scoped to the network namespace


def serve(name, argv):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(_address(name))
    listener.listen(4)
    agent = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    lock = threading.Lock()
    state = {"client": None}
    stdin_lock = threading.Lock()

    def drop(conn):
        with lock:
            if state["client"] is conn:
                state["client"] = None
        try:
            conn.close()
        except OSError:
            pass

    def pump_out():
        pending = b""
        while True:
            data = os.read(agent.stdout.fileno(), BUF)
            if not data:
                break
            # whole lines only: a client that attaches late must never see half a response
            pending += data
            cut = pending.rfind(b"\n")
            if cut < 0:
                continue
            data, pending = pending[: cut + 1], pending[cut + 1:]
            with lock:
                conn = state["client"]
            if conn is None:
                continue
            try:
                conn.sendall(data)
            except OSError:
                drop(conn)
        code = agent.wait()
        sys.stderr.write("farm relay: agent exited with %s\n" % code)
        sys.stderr.flush()
        os._exit(code if code >= 0 else 128 - code)

    def pump_in(conn):
        pending = b""
        while True:
            try:
                data = conn.recv(BUF)
            except OSError:
                data = b""
            if not data:
                break
            # forward whole lines only, so a stream cut mid-line never splices two requests
            pending += data
            cut = pending.rfind(b"\n")
            if cut < 0:
                continue
            chunk, pending = pending[: cut + 1], pending[cut + 1:]
            with lock:
                current = state["client"] is conn
            if not current:
                break
            try:
                with stdin_lock:
                    agent.stdin.write(chunk)
                    agent.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                break
        drop(conn)

    def stop(signum, frame):
        try:
            agent.stdin.close()  # the agent kills everything it started and exits
        except OSError:
            pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threading.Thread(target=pump_out, name="relay-out", daemon=True).start()
    while True:
        conn, _ = listener.accept()
        with lock:
            old, state["client"] = state["client"], conn
        if old is not None:
            try:
                old.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        threading.Thread(target=pump_in, args=(conn,), name="relay-in", daemon=True).start()


def attach(name, wait_s=60.0):
    deadline = time.monotonic() + wait_s
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(_address(name))
            break
        except OSError as e:
            sock.close()
            if time.monotonic() > deadline:
                sys.stderr.write("farm relay: no agent at %r: %s\n" % (name, e))
                return 3
            time.sleep(0.05)

    def downstream():
        while True:
            try:
                data = sock.recv(BUF)
            except OSError:
                data = b""
            if not data:
                os._exit(0)
            view = memoryview(data)
            while view:
                n = os.write(1, view)
                view = view[n:]

    threading.Thread(target=downstream, name="attach-out", daemon=True).start()
    while True:
        data = os.read(0, BUF)
        if not data:
            break
        sock.sendall(data)
    os._exit(0)


def main(argv):
    if len(argv) >= 3 and argv[0] == "serve":
        rest = argv[2:]
        if rest and rest[0] == "--":
            rest = rest[1:]
        return serve(argv[1], rest)
    if len(argv) >= 2 and argv[0] == "attach":
        return attach(argv[1], float(argv[2]) if len(argv) > 2 else 60.0)
    sys.stderr.write("usage: relay.py serve NAME -- ARGV... | relay.py attach NAME [WAIT_S]\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
