"""Commands of the sandbox agent: start them, capture their output, and kill all they started.

Part of the sandbox agent (see server.py): stdlib-only and Python >= 3.8, shipped as a file
next to server.py.

Which processes belong to a command? A command's shell under farm's rules is a *child
subreaper* (``PR_SET_CHILD_SUBREAPER``, kept across ``execve``), so whatever it spawns stays in
its tree while the shell lives: double forks, ``setsid``, ``nohup`` and ``env -i`` cannot leave
it. A timed-out command is stopped with everything below it (stopped processes start nothing and
run no next command), everything below it is killed until nothing is left, then the shell.
Processes that left the tree because their shell had already exited are still found by their
session (the shell led a new one), or by the ``FARM_EXEC_ID`` environment tag a command's
processes inherit. Killing *all* the commands left (``kill_all``) ends their PID namespace at
once where they have one (jail.py), whatever they did to their tree, session and environment.
There, the namespace's init starts every command (spawn.py), in the commands' cgroup where the
backend made one (contain.py); elsewhere each process spawned here moves itself there.
A command that cannot be started for want of pids (a fork storm) is an exec result (exit 126).
"""

import ctypes
import errno
import os
import queue
import selectors
import signal
import subprocess
import sys
import threading
import time
import uuid

if __package__:
    from . import contain, jail, verifier_ns
    from .capture import Capture, _drain, fork_failed  # noqa: F401  (procs.Capture, procs.fork_failed: used by name)
    from .proctable import TAG_VAR, descendants, environ_tags, parent_pid, proc_pids, process_table
else:  # run as a script inside a sandbox: server.py put this directory on sys.path
    import contain
    import jail
    import verifier_ns
    from capture import Capture, _drain, fork_failed  # noqa: F401
    from proctable import TAG_VAR, descendants, environ_tags, parent_pid, proc_pids, process_table

DEFAULT_OUTPUT_CAP = 1 << 20
VERIFIER_RESULT_CAP = 40 << 20
VERIFIER_NS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "verifier_ns.py")
PR_SET_CHILD_SUBREAPER = 36
KILL_ROUNDS = 200
KILL_BUDGET_S = 5.0  # a timed-out command's kill one by one, before its whole jail is ended
STORM_MEMBERS = 1024  # processes in the jail past which a timed-out command is a fork bomb
READ_SIZE = 1 << 16


# "pragma: no mutate block": code that runs only in a process of its own (the agent's, or a child
# between fork and exec); subprocess tests exercise it, mutmut cannot see a hit there.


def log(msg):
    sys.stderr.write("farm-sandbox-agent: %s\n" % msg)
    sys.stderr.flush()


def _load_prctl():  # pragma: no mutate block
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def set_subreaper():  # pragma: no mutate block
    """Orphans of this process's descendants re-parent to it rather than to init; False if refused."""
    if _PRCTL is None:
        return False
    return _PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def _with_umask(then, mask):
    def preexec():  # pragma: no mutate block (runs between fork and exec)
        os.umask(mask)
        if then is not None:
            then()
    return preexec


def _kill(pid, sig=signal.SIGKILL):
    try:
        os.kill(pid, sig)
    except OSError:
        pass


class _OutOfTime(Exception):
    """A kill one by one ran past its budget (``Processes.kill_command``)."""


class Processes:
    """Starts commands, remembers direct children, reaps orphans re-parented to us.

    ``reap``: make this process a subreaper and reap orphans in the background (the agent's own
    process); off when the code runs inside a process with children of its own (tests)."""

    def __init__(self, reap=True):
        self.lock = threading.Lock()
        self.jail_lock = threading.Lock()  # held while the jail is read for a spawn or replaced
        self.children = set()
        self.me = os.getpid()
        self.prefix = uuid.uuid4().hex[:12]
        self.counter = 0
        self.jail = None  # jail.Jail once the agent's process made one (start_jail)
        self._jail_requests = None  # the jailer thread's queue, once there is a jail
        self.isolation = "none"
        self.contained = contain.Containment.from_environment()
        if reap:
            self.start_reaping()

    def start_jail(self):  # pragma: no mutate block (the agent's own process only)
        """Put every later child in a nested PID namespace (jail.py); before any other fork."""
        made, why = jail.start(join_fds=self.contained.fds, home_fds=self.contained.home_fds)
        self.jail = made
        self.isolation = made.describe() if made else "none: " + why
        if self.contained.fds:  # the commands' own limits (local/cgroups.py): they cannot starve the agent
            self.isolation += "+cgroup" if made else " (commands in a cgroup of their own)"
        if made is None and why and not why.startswith("not requested"):
            log("commands are not isolated from the agent: " + why)
        if made is not None:
            # a jail made again later must come from a thread that lives as long as the agent:
            # the holder's parent-death signal fires when the *thread* that forked it ends
            self._jail_requests = queue.Queue()
            threading.Thread(target=self._jailer_loop, name="jailer", daemon=True).start()

    def _jailer_loop(self):  # pragma: no mutate block
        while True:
            drop, reply = self._jail_requests.get()
            try:
                reply.put(jail.start(drop, self.contained.fds, self.contained.home_fds))
            except Exception as e:  # never let the jailer die silently
                reply.put((None, repr(e)))

    def _new_jail(self, drop):  # pragma: no mutate block
        if self._jail_requests is None:
            return None, "no jailer thread"
        reply = queue.Queue()
        self._jail_requests.put((drop, reply))
        try:
            return reply.get(timeout=60)
        except queue.Empty:
            return None, "the jailer did not answer within 60 s"

    def _protected(self):
        return {self.me} | (self.jail.protected() if self.jail else set())

    def start_reaping(self):  # pragma: no mutate block
        # Orphans of our commands (double forks, nohup) re-parent to us rather than to the
        # namespace's init, so they stay findable and get reaped here.
        if not set_subreaper():
            log("no subreaper: prctl(PR_SET_CHILD_SUBREAPER) refused")
        t = threading.Thread(target=self._reap_loop, name="reaper", daemon=True)
        t.start()

    def new_tag(self):
        with self.lock:
            self.counter += 1
            return "%s-%d" % (self.prefix, self.counter)

    def spawn(self, argv, jailed=True, umask=None, subreaper=True, **kwargs):
        """Start ``argv`` as a subreaper (unless ``subreaper`` is false: the vendor's shell is
        none), under ``umask`` if given: in the jail where there is one and ``jailed`` (its init
        forks it: spawn.py; stdin /dev/null, stdout a pipe, stderr a pipe or ``STDOUT``), else
        as a Popen of ours."""
        if jailed:
            # the jail is read under its lock: kill_jail may be replacing it
            with self.jail_lock:
                if self.jail is not None:
                    return self._spawn_jailed(argv, umask, subreaper, kwargs)
        # Registration happens under the reaper's lock so that it never reaps a fresh child of
        # ours before Popen.wait() can collect its exit status.
        preexec = set_subreaper if _PRCTL is not None and subreaper else None
        if umask is not None:  # Popen's own umask= is Python >= 3.9
            preexec = _with_umask(preexec, int(umask))
        preexec = self.contained.joining(preexec)
        with self.lock:
            proc = subprocess.Popen(argv, preexec_fn=preexec, **kwargs)
            self.children.add(proc.pid)
        return proc

    def _spawn_jailed(self, argv, umask, subreaper, kwargs):
        if (kwargs.get("stdin"), kwargs.get("stdout")) != (subprocess.DEVNULL, subprocess.PIPE):
            raise ValueError("a jailed command reads /dev/null and writes to pipes")
        for _ in range(2):
            spawner = self.jail.spawner
            try:
                return spawner.spawn(argv, kwargs.get("cwd"), kwargs.get("env"), umask, subreaper,
                                     merge_stderr=kwargs["stderr"] == subprocess.STDOUT)
            except OSError as e:
                if not spawner.dead or e.errno != errno.ESRCH:
                    raise
            # its init died outside a kill of ours (the OOM killer's choice, say), and with it
            # everything in the namespace: a fresh one for this command and the next
            self._replace_jail(self.jail)
            if self.jail is None:
                break
        raise OSError(errno.ESRCH, "the commands' namespace is gone and could not be made again")

    def forget(self, proc):
        with self.lock:
            self.children.discard(proc.pid)

    def reap_orphans(self):
        with self.lock:
            for pid in proc_pids():
                if pid in self.children or pid in self._protected():
                    continue
                if parent_pid(pid) == self.me:
                    try:
                        os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        pass

    def _reap_loop(self):  # pragma: no mutate block
        while True:
            time.sleep(0.5)
            try:
                self.reap_orphans()
            except Exception as e:  # never let the reaper die silently
                log("reaper: %r" % e)

    def members(self, top, tag, deadline=None):
        """Live processes of the command whose shell is ``top`` (``top`` itself excluded).

        Raises _OutOfTime past ``deadline``: one scan of thousands of processes' environments
        can itself take seconds."""
        table = process_table()
        found = descendants(top, table)
        for pid, (_, _, pgrp, session) in table.items():
            if deadline is not None and time.monotonic() > deadline:
                raise _OutOfTime()
            if session == top or pgrp == top or (pid not in found and tag in environ_tags(pid)):
                found.add(pid)
        found.discard(top)
        return found - self._protected()

    def freeze(self, top, tag, deadline=None):
        """SIGSTOP the command's shell and all its processes until no unstopped one is left.

        Killed one by one, a shell would see its child die and run its next command (``sleep 5;
        touch x`` would touch x) before its own SIGKILL lands; stopped, nothing runs or forks."""
        _kill(top, signal.SIGSTOP)
        stopped = set()
        for _ in range(KILL_ROUNDS):
            if deadline is not None and time.monotonic() > deadline:
                break
            pids = self.members(top, tag, deadline) - stopped
            if not pids:
                break
            for pid in pids:
                _kill(pid, signal.SIGSTOP)
            stopped |= pids
        return stopped

    def kill_command(self, top, tag, budget_s=None):
        """SIGKILL everything the command started, then its shell; True when nothing is left.

        Everything is stopped first (see ``freeze``); the shell is killed last: while it lives it
        is the subreaper of all it started, so nothing can leave its tree during the kill.
        ``budget_s``: give up after that long (a fork bomb of thousands of processes, each round
        a scan of them all, can take minutes one by one: ``end_command`` then ends the jail)."""
        deadline = None if budget_s is None else time.monotonic() + budget_s
        try:
            return self._kill_command(top, tag, deadline)
        except _OutOfTime:
            return False

    def _kill_command(self, top, tag, deadline):
        for _ in range(KILL_ROUNDS):
            if deadline is not None and time.monotonic() > deadline:
                return False
            pids = self.freeze(top, tag, deadline)
            if not pids:
                break
            for pid in pids:
                _kill(pid)
            time.sleep(0.002)
        try:
            os.killpg(top, signal.SIGKILL)
        except OSError:
            pass
        _kill(top)
        # what re-parented away from the dying shell is found by its session or tag
        for _ in range(KILL_ROUNDS):
            pids = self.members(top, tag, deadline)
            if not pids:
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            for pid in pids:
                _kill(pid, signal.SIGSTOP)
            for pid in pids:
                _kill(pid)
            time.sleep(0.005)
            self.reap_orphans()
        return False

    def end_command(self, top, tag):
        """Kill a timed-out command; None, or the note its result carries when that took ending
        the whole jail: a fork bomb (more than ``STORM_MEMBERS`` processes in the jail, counted
        cheaply by namespace: a kill one by one scans every process's environment each round,
        and under the memory pressure of thousands of shells a scan alone takes seconds), or
        processes that outran a kill one by one within ``KILL_BUDGET_S``. The kernel then ends
        every process of the namespace at once: what earlier commands left running goes too."""
        # every command stops at once first (cgroups.py's freezer): while thousands of processes
        # fork and die, even one listdir of /proc can take seconds
        self.contained.freeze(True)
        try:
            seen = sum(1 for _ in proc_pids()) if self.jail is not None else 0  # one listdir
        finally:
            self.contained.freeze(False)
        storm = seen > STORM_MEMBERS
        if not storm and (self.kill_command(top, tag, KILL_BUDGET_S) or self.jail is None):
            return None
        killed = self.kill_jail(restart=True, held=seen if storm else None, frozen=storm)
        return ("farm: the command's processes multiplied faster than they could be killed one by one; "
                "all %d processes of the agent's commands were killed, including any an earlier command "
                "left running\n" % killed)

    def kill_everything(self):  # pragma: no mutate block
        """SIGKILL every process below this one and every one carrying one of our tags."""
        return self.kill_all(restart_jail=False)[0]

    def kill_jail(self, restart=True, held=None, frozen=False):  # pragma: no mutate block (the agent only)
        """Kill the commands' namespace, all of it at once, if anything runs in it; then make a
        fresh one for later commands (``restart``). Returns how many processes it held.

        ``held``: that count, known already (a fork bomb: the scan by namespace, one readlink a
        process while thousands are born and die, can take longer than the kill)."""
        # no command is spawned into the dying namespace meanwhile; the reaper (self.lock) goes
        # on: the kernel waits for the namespace's zombies to be reaped before the init is gone
        with self.jail_lock:
            old = self.jail
            if old is None:
                return 0
            members = old.members() if held is None else range(held)
            if not members:
                return 0  # an idle jail stays: nothing to kill, nothing to restart
            # ``frozen``: the storm stops while the init's SIGKILL lands (no fork in the namespace
            # succeeds after it), and thaws so that its processes can take their own SIGKILLs
            if frozen and self.contained.freeze(True):
                old.kill(thaw=lambda: self.contained.freeze(False))
            else:
                old.kill()
            self.jail = None
            if restart:
                self._replace_jail(old)
        return len(members)

    def _replace_jail(self, old):  # pragma: no mutate block (the agent only)
        """A fresh namespace in place of ``old`` (killed, or found dead); jail_lock held."""
        self.jail = None
        made, why = self._new_jail(old.drop)
        self.jail = made
        if made is None:
            self.isolation = "none: the jail could not be made again: " + why
            log("commands are no longer isolated from the agent: " + why)

    def kill_all(self, restart_jail=True):
        """``kill_everything`` that also says how many distinct processes it killed: (clean, n).

        Where the commands run in a jail, its namespace goes first, with everything in it, by
        the kernel (``kill_jail``): a fork storm that filled the sandbox's pids limit cannot
        outrun that. What is left (tagged processes outside it, or everything where there is no
        jail) is killed one by one; the jail's own (its init's standby) are not the commands'."""
        in_jail = self.kill_jail(restart_jail) if self.jail is not None else 0
        prefix = self.prefix + "-"
        killed = set()
        for _ in range(KILL_ROUNDS):
            table = process_table()
            pids = descendants(self.me, table)
            pids.update(p for p in table if any(t.startswith(prefix) for t in environ_tags(p)))
            pids -= self._protected()
            if self.jail is not None:
                pids = {p for p in pids if not self.jail.own(p)}  # the init's standby (spawn.py)
            if not pids:
                return True, in_jail + len(killed)
            for pid in pids:
                _kill(pid)
            killed |= pids
            time.sleep(0.005)
            self.reap_orphans()
        return False, in_jail + len(killed)


# --- running one command -------------------------------------------------------------------


def run_command(procs, command, timeout_s=120.0, cwd=None, env=None, merge_stderr=False,
                output_cap=DEFAULT_OUTPUT_CAP, private_verifier=False, login=False):
    """Run ``bash -c command`` (``login``: ``bash -lc``) with a timeout that kills all it
    started; the exec result dict.

    ``private_verifier``: run it as the in-place verifier, outside the jail in a mount namespace
    of its own (verifier_ns.py); its stderr is merged into stdout and the result carries
    ``verifier`` (what verifier_ns.py reported: the files it left in /logs/verifier)."""
    if output_cap is None:
        output_cap = DEFAULT_OUTPUT_CAP
    if cwd and not os.path.isdir(cwd):
        # like a shell whose `cd` failed: the command's problem, not the channel's
        msg = "farm: cannot run in %s: no such directory\n" % cwd
        return {"exit_code": 1, "stdout": "", "stderr": msg, "timed_out": False, "duration_s": 0.0,
                "truncated": False, "output_bytes": len(msg)}
    tag = procs.new_tag()
    full_env = dict(os.environ)
    if env:
        full_env.update({str(k): str(v) for k, v in env.items()})
    full_env[TAG_VAR] = tag
    started = time.monotonic()
    deadline = started + float(timeout_s)
    try:
        argv = ["/bin/bash", "-lc" if login else "-c", command]
        if private_verifier:
            merge_stderr = False  # its stderr carries only verifier_ns.py's result line
            drop = procs.jail.drop if procs.jail is not None else ()
            argv = [sys.executable, "-I", "-S", VERIFIER_NS, ",".join(str(c) for c in drop) or "-",
                    cwd or "/", "--"] + argv
        proc = procs.spawn(
            argv,
            jailed=not private_verifier,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            cwd=cwd or None,
            env=full_env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as e:
        if e.errno not in (errno.EAGAIN, errno.ENOMEM):
            raise
        # the sandbox's pids limit is full (the agent's own fork storm): like a shell whose
        # fork failed, the command's outcome, not a broken channel
        return fork_failed(e, started)
    out = Capture(output_cap)
    # the private verifier's stderr is one result line holding its /logs/verifier files
    err = Capture(max(output_cap, VERIFIER_RESULT_CAP) if private_verifier else output_cap)
    timed_out = False
    note = None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, out)
    if proc.stderr is not None:
        sel.register(proc.stderr, selectors.EVENT_READ, err)
    try:
        while sel.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in sel.select(min(remaining, 1.0)):
                data = os.read(key.fd, READ_SIZE)
                if data:
                    key.data.feed(data)
                else:
                    sel.unregister(key.fileobj)
        if not timed_out:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
        if timed_out:
            note = procs.end_command(proc.pid, tag)
            proc.wait()
            # what it started was re-parented to us as the shell died: reap it now, or until the
            # reaper's next round `kill -0` still finds it (a zombie) where no jail's init reaps
            procs.reap_orphans()
            _drain(sel)
    finally:
        sel.close()
        for f in (proc.stdout, proc.stderr):
            if f is not None:
                f.close()
        if proc.returncode is None:
            procs.kill_command(proc.pid, tag)
            proc.wait()
        procs.forget(proc)
    code = proc.returncode
    if timed_out:
        code = 124
    elif code < 0:
        code = 128 - code
    result = {
        "exit_code": code,
        "stdout": out.text(),
        "stderr": err.text() + (note or ""),
        "timed_out": timed_out,
        "duration_s": round(time.monotonic() - started, 6),
        "truncated": out.truncated or err.truncated,
        "output_bytes": out.total + err.total,
    }
    if private_verifier:
        result["verifier"], result["stderr"] = verifier_ns.parse(result["stderr"])
    return result
