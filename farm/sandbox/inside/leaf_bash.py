"""One Bash tool call run the way the vendor's tool runner runs it (agent.compat leaf-*).

A program, not a module: leaf_tools.py starts it through the sandbox agent's command runner
(so every process it starts is still tagged, jailed and killed when the sandbox closes), as

    python -I -S leaf_bash.py TIMEOUT_S CAP_BYTES UMASK_OCTAL COMMAND

It runs ``/bin/bash -lc COMMAND`` under that umask with separate pipes. On timeout it kills
the shell alone and returns at once, so what the shell started (``server &``) keeps running
for later calls, as under the vendor's runner; farm-safe kills the whole command instead.
It answers with the raw bytes (the caller decides how they decode): one line
``timed_out returncode stdout_total stderr_total``, then the first CAP_BYTES of stdout and of
stderr, each as a hex line. Stdlib only, Python >= 3.8.
"""

import os
import selectors
import subprocess
import sys
import time


def main():
    timeout_s, cap, mask, command = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3], 8), sys.argv[4]
    os.umask(mask)
    proc = subprocess.Popen(["/bin/bash", "-lc", command], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, close_fds=True)
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    total = {proc.stdout: 0, proc.stderr: 0}
    sel = selectors.DefaultSelector()
    for f in kept:
        sel.register(f, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    timed_out = False
    # like the vendor's (subprocess.run with a timeout): read both pipes to their end, then
    # wait for the shell, all within the one deadline
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        for key, _ in sel.select(left):
            data = os.read(key.fd, 1 << 16)
            if not data:
                sel.unregister(key.fileobj)
                continue
            total[key.fileobj] += len(data)
            room = cap - len(kept[key.fileobj])
            if room > 0:
                kept[key.fileobj] += data[:room]
    if not timed_out:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
    if timed_out:
        proc.kill()  # the shell only
        proc.wait()
    out = sys.stdout
    out.write("%d %d %d %d\n" % (timed_out, proc.returncode, total[proc.stdout], total[proc.stderr]))
    out.write(bytes(kept[proc.stdout]).hex() + "\n" + bytes(kept[proc.stderr]).hex() + "\n")
    out.flush()


if __name__ == "__main__":
    main()
