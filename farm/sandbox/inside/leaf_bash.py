"""One Bash tool call run the way the vendor's tool runner runs it (agent.compat leaf-*).

A program, not a module: leaf_tools.py starts it through the sandbox agent's command runner
(so every process it starts is still tagged, jailed and killed when the sandbox closes), as

    python -I -S leaf_bash.py TIMEOUT_S CAP_BYTES UMASK_OCTAL START_DIR KEEP_NAMES COMMAND

It runs ``/bin/bash -lc COMMAND`` under that umask with separate pipes, in the environment the
vendor's transport gives its shell: ``OLDPWD`` is the start directory (so ``cd -`` works) and
``SHLVL`` reads 4, and nothing of farm's is in it. The command runner tags every command with
``FARM_EXEC_ID`` (procs.py) so it can find what a command left; that tag stays on this runner,
farm's own process, and on nothing the shell starts. ``KEEP_NAMES`` (comma-separated, may be
empty) are ``FARM_*`` names the task's own environment sets, which stay. On timeout it kills
the shell alone and returns at once, so what the shell started (``server &``) keeps running
for later calls, as under the vendor's runner; farm-safe kills the whole command instead.
It answers with the raw bytes (the caller decides how they decode): one line
``timed_out returncode stdout_total stderr_total``, then the first CAP_BYTES of stdout and of
stderr, each as a hex line. Stdlib only, Python >= 3.8.
"""

import os
import select
import sys
import time

# os, select, sys and time only: this runs once per Bash call, and importing subprocess (with
# selectors, signal, threading) costs more than the Python start itself


# the vendor's transport starts the runner's shell three shells deep: bash adds one, so 4 is shown
VENDOR_SHLVL = "3"


def shell_env(start_dir, keep):
    """The shell's environment: this runner's, less every ``FARM_*`` name not in ``keep``, with
    the vendor transport's ``OLDPWD`` and ``SHLVL``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_") or k in keep}
    env["OLDPWD"] = start_dir
    env["SHLVL"] = VENDOR_SHLVL
    return env


def _spawn(command, env):
    """``/bin/bash -lc command`` with stdin /dev/null and two pipes; (pid, stdout fd, stderr fd)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no mutate block (the child between fork and exec)
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            for fd in {null, out_r, out_w, err_r, err_w} - {0, 1, 2}:
                os.close(fd)
            os.execve("/bin/bash", ["/bin/bash", "-lc", command], env)
        finally:
            os._exit(127)
    os.close(out_w)
    os.close(err_w)
    return pid, out_r, err_r


def _returncode(status):
    """As Python's subprocess reports it: negative for a signal."""
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def main():
    timeout_s, cap, mask = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3], 8)
    start_dir, keep, command = sys.argv[4], set(filter(None, sys.argv[5].split(","))), sys.argv[6]
    os.umask(mask)
    pid, out_fd, err_fd = _spawn(command, shell_env(start_dir, keep))
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    total = {out_fd: 0, err_fd: 0}
    open_fds = [out_fd, err_fd]
    deadline = time.monotonic() + timeout_s
    timed_out = False
    status = None
    # like the vendor's (subprocess.run with a timeout): read both pipes to their end, then
    # wait for the shell, all within the one deadline
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select(open_fds, [], [], left)
        for fd in ready:
            data = os.read(fd, 1 << 16)
            if not data:
                open_fds.remove(fd)
                continue
            total[fd] += len(data)
            room = cap - len(kept[fd])
            if room > 0:
                kept[fd] += data[:room]
    while not timed_out:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() >= deadline:
            timed_out = True
            break
        time.sleep(0.002)
    if timed_out:
        os.kill(pid, 9)  # SIGKILL to the shell only
        _, status = os.waitpid(pid, 0)
    out = sys.stdout
    out.write("%d %d %d %d\n" % (timed_out, _returncode(status), total[out_fd], total[err_fd]))
    out.write(bytes(kept[out_fd]).hex() + "\n" + bytes(kept[err_fd]).hex() + "\n")
    out.flush()


if __name__ == "__main__":
    main()
