"""One Bash tool call run the way the vendor's tool runner runs it (agent.compat leaf-*).

Part of the sandbox agent (see server.py), run inside its own long-lived process: a Bash call
starts the shell and nothing else (until issue 28 it started a Python runner per call, one
more interpreter start than the vendor's transport makes). The shell is started through the
agent's command runner (procs.py), so it is still jailed, its orphans still re-parent to the
agent, and it is killed when the sandbox closes.

It runs ``/bin/bash -lc COMMAND`` under the transport's umask with stdin ``/dev/null`` and
separate stdout and stderr pipes, in the environment the vendor's transport gives its shell:
``OLDPWD`` is the start directory (so ``cd -`` works) and ``SHLVL`` reads 4, and nothing of
farm's is in it: no ``FARM_*`` name (not even the command runner's tag ``FARM_EXEC_ID``, see
procs.py) except those the task's own environment sets. Like the vendor's runner
(``subprocess.run`` with a timeout) it reads both pipes to their end and then waits for the
shell, all within one deadline; on timeout it kills the shell alone and returns at once, so
what the shell started (``server &``) keeps running for later calls (farm-safe kills the whole
command instead). It answers with the raw bytes (the caller decides how they decode): the
first ``cap`` bytes of each stream and each stream's total, and the shell's return code as
Python's subprocess reports it (negative for a signal). Stdlib only, Python >= 3.8.
"""

import errno
import os
import selectors
import signal
import subprocess
import time

if __package__:
    from . import procs
else:  # run as a script inside a sandbox: server.py put this directory on sys.path
    import procs

# the vendor's transport starts the runner's shell three shells deep: bash adds one, so 4 is shown
VENDOR_SHLVL = "3"
READ_SIZE = 1 << 16


def shell_env(base, start_dir, keep):
    """The shell's environment: ``base`` less every ``FARM_*`` name not in ``keep``, with the
    vendor transport's ``OLDPWD`` and ``SHLVL``."""
    env = {k: v for k, v in base.items() if not k.startswith("FARM_") or k in keep}
    env["OLDPWD"] = start_dir
    env["SHLVL"] = VENDOR_SHLVL
    return env


def _failed(code, message):
    """The runner could not start the shell: the caller reports it as farm's failure."""
    return {"runner_failed": True, "exit_code": code, "stderr": message}


def _kill_shell(proc):
    """SIGKILL the shell alone (in a jail too: the jail's init started it, spawn.py, and
    ``proc.pid`` is the shell's own)."""
    if proc.poll() is not None:
        return  # already gone (and reaped: its pid may be another process's by now)
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except OSError:
        pass


def run_shell(processes, command, timeout_s, cap, umask, start_dir, env=None, keep=()):
    """Run one vendor Bash call through ``processes`` (a procs.Processes).

    Returns {"timed_out", "returncode", "stdout", "stderr" (bytes, the first ``cap`` of each),
    "stdout_total", "stderr_total", "duration_s"}, or {"runner_failed": True, "exit_code",
    "stderr"} when the shell could not be started.

    Raises:
        OSError: the shell could not be started for a reason other than the process limit.
    """
    if start_dir and not os.path.isdir(start_dir):
        return _failed(1, "farm: cannot run in %s: no such directory\n" % start_dir)
    base = dict(os.environ)
    if env:
        base.update({str(k): str(v) for k, v in env.items()})
    started = time.monotonic()
    deadline = started + float(timeout_s)
    try:
        # its own session, as every command of the agent's: a `kill 0` in the shell must not
        # reach the agent's process group
        # no subreaper either, as under the vendor's runner: what the shell orphans goes up to the
        # agent (or the jail's init), which reaps it and finds it when the sandbox closes
        proc = processes.spawn(["/bin/bash", "-lc", command], umask=umask, subreaper=False, stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=start_dir or None,
                               env=shell_env(base, start_dir, set(keep)), start_new_session=True,
                               close_fds=True)
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.ENOMEM):
            raise
        return _failed(126, procs.fork_failed(e, started)["stderr"])
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    kept = {out_fd: bytearray(), err_fd: bytearray()}
    total = dict.fromkeys(kept, 0)
    timed_out = False
    sel = selectors.DefaultSelector()
    try:
        for fd in kept:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            for key, _ in sel.select(left):
                data = os.read(key.fd, READ_SIZE)
                if not data:
                    sel.unregister(key.fd)
                    continue
                total[key.fd] += len(data)
                room = cap - len(kept[key.fd])
                if room > 0:
                    kept[key.fd] += data[:room]
        if not timed_out:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            _kill_shell(proc)  # what the shell started keeps running, as under the vendor's runner
            proc.wait()
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
        if proc.returncode is None:  # an error of our own: leave no shell behind
            _kill_shell(proc)
            proc.wait()
        processes.forget(proc)
    return {
        "timed_out": timed_out,
        # as Python's subprocess reports it: negative for a signal (in a jail too: spawn.py)
        "returncode": proc.returncode,
        "stdout": bytes(kept[out_fd]),
        "stderr": bytes(kept[err_fd]),
        "stdout_total": total[out_fd],
        "stderr_total": total[err_fd],
        "duration_s": round(time.monotonic() - started, 6),
    }
