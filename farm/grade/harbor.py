"""The Harbor verifier protocol, run inside a sandbox.

After the agent: wipe /tests and /logs/verifier, upload the task's tests/ to /tests, run
``bash /tests/test.sh`` in the workdir with the verifier timeout, then read
/logs/verifier/reward.json (a number, ``{"reward": x}`` or a one-key object) or else
reward.txt. Resolved iff reward >= 1. A missing or unparseable reward is an infrastructure
error of the verifier — never a silent 0 (docs/grading.md).

With ``grade.verifier_cache.dir`` set, the cache (farm/grade/verifier_cache.py) is staged
first and test.sh runs with uv, pinned wheels and a CPython 3.13 it can use offline. A
verifier whose own set-up failed is ``verifier_setup`` (rules in farm/grade/verifier_setup.py),
never a reward of 0 for the agent.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from farm.config import VerifierCacheConfig
from farm.grade.verifier_cache import STAGE_DIR, CacheError, Manifest, load_manifest, wheels_for
from farm.grade.verifier_setup import classify
from farm.sandbox.base import Sandbox, VerifierRun
from farm.tasks.model import Task

VERIFIER_OUTPUT_CAP = 1 << 20
VERIFIER_LOGS = "/logs/verifier"
# an agent process replaced /tests or /logs/verifier by a link while the verifier started
VERIFIER_FILES_FLAG = "verifier_files@verifier"
# the SWE-bench log reports a graded test failed and later passed (farm/grade/swebench.py)
TEST_LOG_FLAG = "test_log@verifier"

# error classes of a verdict without a valid reward (GradeResult.error_class; a trial records
# them as infra_error): the task ships no tests/; the verifier's own set-up failed
# (farm/grade/verifier_setup.py); the configured verifier cache is unusable; test.sh timed out;
# its output lacks the success marker; it wrote no readable reward
VERIFIER_MISSING = "verifier_missing"
VERIFIER_SETUP = "verifier_setup"
VERIFIER_CACHE = "verifier_cache"
VERIFIER_TIMEOUT = "verifier_timeout"
VERIFIER_INCOMPLETE = "verifier_incomplete"
VERIFIER_NO_REWARD = "verifier_no_reward"


@dataclass
class GradeResult:
    reward: float | None
    resolved: bool
    output: str = ""
    error_class: str | None = None  # set when no valid reward was produced
    error: str | None = None
    duration_s: float = 0.0
    stage_s: float | None = None  # time spent uploading and placing the verifier cache
    runs: int = 1  # verifier runs behind this result (>1: verifier-only retries, farm/grade/attempt.py)
    # what the verifier's run itself found tampered with ("<rule>@verifier", farm/grade/tamper.py)
    flags: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        return self.error_class is None


class RewardError(ValueError):
    pass


def parse_reward(json_text: str | None, txt_text: str | None) -> float:
    """The reward from reward.json (preferred) or reward.txt; RewardError if neither is valid."""
    if json_text is not None:
        try:
            data = json.loads(json_text)
        except ValueError as exc:
            raise RewardError(f"reward.json is not JSON: {exc}") from None
        if isinstance(data, dict):
            if "reward" in data:
                value = data["reward"]
            elif len(data) == 1:
                value = next(iter(data.values()))
            else:
                raise RewardError(f"reward.json has several keys and no 'reward': {sorted(data)}")
        else:
            value = data
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RewardError(f"reward.json value {value!r} is not a number")
        reward = float(value)
    elif txt_text is not None:
        text = txt_text.strip()
        if not text:
            raise RewardError("reward.txt is empty")
        try:
            reward = float(text)
        except ValueError:
            raise RewardError(f"reward.txt does not hold a number: {text[:80]!r}") from None
    else:
        raise RewardError("the verifier wrote neither /logs/verifier/reward.json nor reward.txt")
    if not math.isfinite(reward):
        raise RewardError(f"reward {reward!r} is not finite")
    if reward < 0:
        raise RewardError(f"reward {reward!r} is negative")
    return reward


async def _read_optional(sandbox: Sandbox, path: str) -> str | None:
    stat = await sandbox.stat(path)
    if not stat.exists or stat.is_dir:
        return None
    return (await sandbox.read_file(path)).decode("utf-8", errors="replace")


# uv's installer leaves an env file that test.sh sources; this one does the same (~/.local/bin on PATH)
_ENV_FILE = 'case ":$PATH:" in *":{bin}:"*) ;; *) PATH="{bin}:$PATH"; export PATH ;; esac\n'


async def _upload_wheels(sandbox: Sandbox, man: Manifest, files: list[str] | None) -> str:
    """Send the wheels (all, or only ``files``) to STAGE_DIR/wheels; says how many went."""
    src = man.root / "wheels"
    if files is None:
        await sandbox.upload(src, f"{STAGE_DIR}/wheels")
        return f"all {len(man.data['wheels'])} wheels"
    with tempfile.TemporaryDirectory(prefix="farm-wheels-") as tmp:
        for name in files:
            if (src / name).is_file():
                try:
                    os.link(src / name, Path(tmp) / name)
                except OSError:  # another filesystem, or a read-only cache: copy
                    shutil.copy2(src / name, Path(tmp) / name)
        await sandbox.upload(Path(tmp), f"{STAGE_DIR}/wheels")
    return f"{len(files)} of {len(man.data['wheels'])} wheels (the pins test.sh names)"


# the files of ~/.local/bin the staging places and a verifier runs (``source ~/.local/bin/env``, uv, uvx)
HOME_TOOLS = ("uv", "uvx", "env")
# name and sha256 of each of them that exists (a link is read through), one per line
_HOME_TOOLS_PROBE = ('b="${HOME:-/root}/.local/bin"; for t in ' + " ".join(HOME_TOOLS) + '; do '
                     '[ -f "$b/$t" ] && echo "$t $(sha256sum < "$b/$t" | cut -d" " -f1)"; done; true')


async def home_tools(sandbox: Sandbox, env: dict[str, str] | None = None) -> dict[str, str]:
    """sha256 of each ``HOME_TOOLS`` file in ~/.local/bin now: taken before the agent's first
    step, it tells the staging which of them the image (or the task's set-up) put there.

    Raises:
        SandboxError: the sandbox is lost."""
    res = await sandbox.exec(_HOME_TOOLS_PROBE, timeout_s=60, cwd="/", env=env or None)
    out = {}
    for line in res.stdout.splitlines():
        name, _, digest = line.partition(" ")
        if name in HOME_TOOLS and len(digest) == 64:
            out[name] = digest
    return out


async def stage_verifier_cache(sandbox: Sandbox, cache: VerifierCacheConfig, env: dict[str, str],
                               test_sh: str = "", tests_dir: Path | None = None,
                               image_tools: dict[str, str] | None = None) -> tuple[dict[str, str], str, str, float]:
    """Upload the cache to STAGE_DIR and put uv where the astral installer would, when absent.

    Only what the verifier can use travels: the wheels of the default tool pins and of the pins
    ``test_sh`` names and of the PEP 723 script blocks in it and in ``tests_dir/*.py``, uv when
    ~/.local/bin has none, the python bundle when no python3.13 is on PATH (an image's own
    python always wins). Returns the variables test.sh
    gets, the PATH suffix for its command line, the header line the verifier output starts
    with, and the seconds staging took.

    ``image_tools``: :func:`home_tools` as taken before the agent's first step (in-place
    grading). A ``uv``, ``uvx`` or ``env`` of ~/.local/bin that is not as it was then was
    written by the agent, and a verifier that sources ``env`` or runs uv would run it: it is
    replaced by the cache's. ``None`` (a fresh sandbox): what is there is the image's."""
    assert cache.dir is not None
    man = load_manifest(cache.dir)
    t0 = time.monotonic()
    probe = await sandbox.exec(_HOME_TOOLS_PROBE + "; command -v python3.13 >/dev/null && echo has-python; true",
                               timeout_s=60, cwd="/", env=env or None)
    now: dict[str, str] = {}
    for line in probe.stdout.splitlines():
        name, _, digest = line.partition(" ")
        if name in HOME_TOOLS:
            now[name] = digest
    # the image's own (or, with no record of the start, whatever is there) is kept
    own = {t for t in now if image_tools is None or image_tools.get(t) == now[t]}
    agents = sorted(set(now) - own)
    has_python = "has-python" in probe.stdout.split()
    parts = ([] if {"uv", "uvx"} <= own else ["bin"]) + ([] if has_python else ["python"])
    await sandbox.exec(f"mkdir -p {STAGE_DIR}", timeout_s=60, cwd="/")
    sent = await _upload_wheels(sandbox, man, wheels_for(man, test_sh, tests_dir))
    for part in parts:
        await sandbox.upload(man.root / part, f"{STAGE_DIR}/{part}")
    keep = " ".join(sorted(own)) or "-"
    # rm first: a link the agent left must not take the cache's file to where it points
    place = (
        f'b="${{HOME:-/root}}/.local/bin"; mkdir -p "$b"; keep=" {keep} "; '
        'for t in uv uvx; do case "$keep" in *" $t "*) echo "$t=kept";; '
        f'*) rm -f "$b/$t" && cp {STAGE_DIR}/bin/$t "$b/$t" && echo "$t=placed";; esac; done; '
        'case "$keep" in *" env "*) echo env=kept;; '
        f"*) rm -f \"$b/env\" && printf '%s' {shlex.quote(_ENV_FILE)} | sed \"s#{{bin}}#$b#g\" > \"$b/env\" "
        "&& echo env=placed;; esac"
    )
    res = await sandbox.exec(place, timeout_s=120, cwd="/", env=env or None)
    stage_s = time.monotonic() - t0
    placed = " ".join(res.output.split()) if res.exit_code == 0 else f"placing uv failed: {res.output.strip()[-200:]}"
    if agents:
        placed += f" (replaced what the agent wrote: {' '.join(agents)})"
    wheels = f"{STAGE_DIR}/wheels"
    variables = {"UV_FIND_LINKS": wheels, "PIP_FIND_LINKS": wheels, "UV_PYTHON_DOWNLOADS": "never"}
    if cache.offline:
        # not PIP_NO_INDEX: it would also override a test's own `pip install --index-url` (TB2
        # pypi-server installs from the server the agent started); an unreachable PyPI is
        # skipped at once with no retries, and the wheels come from PIP_FIND_LINKS
        variables |= {"UV_OFFLINE": "1", "PIP_RETRIES": "0", "PIP_TIMEOUT": "5"}
    else:  # uv's built-in roots do not know a site's TLS-inspecting proxy; the image's CA store does
        variables["UV_NATIVE_TLS"] = "1"
    python = ("the image's own python3.13 (bundle not staged)" if has_python
              else f"python {man.python_version} appended to PATH")
    what = ", ".join([sent, *parts])
    header = (f"[farm verifier-cache] staged {cache.dir} ({what}) at {STAGE_DIR} in {stage_s:.2f}s "
              f"({man.summary()}); ~/.local/bin: {placed}; {python}; "
              + " ".join(f"{k}={v}" for k, v in sorted(variables.items())) + "\n")
    suffix = "" if has_python else f'export PATH="$PATH:{STAGE_DIR}/python/bin"; '
    return variables, suffix, header, stage_s


async def run_harbor_verifier(task: Task, sandbox: Sandbox, cache: VerifierCacheConfig | None = None, *,
                              kill_leftovers: bool = False, image_tools: dict[str, str] | None = None) -> GradeResult:
    """Run the task's tests/test.sh in ``sandbox`` and read its reward.

    ``kill_leftovers``: first kill every process the agent left (in-place grading of a task
    whose answer is its repository; a task whose answer is a running server needs them).
    ``image_tools``: :func:`home_tools` before the agent's first step (in place, with a
    verifier cache): the agent's uv, uvx or env in ~/.local/bin is replaced by the cache's.
    """
    if task.verifier.tests_dir is None:
        return GradeResult(None, False, error_class=VERIFIER_MISSING, error="task has no tests/ directory")
    t0 = time.monotonic()
    wd = shlex.quote(task.workdir)
    # Stage agent-created files so verifiers that run `git clean` do not delete them (Leaf does
    # the same); the index is not part of the captured patch, which was taken before.
    # nothing the agent started may outlive its phase: a daemon could write the reward while the
    # tests run (in a fresh verifier sandbox there is nothing to kill)
    if kill_leftovers:
        await sandbox.kill_leftovers()
    prep = (
        # a path the agent controlled must not redirect the verifier: /logs, /logs/verifier or
        # /tests replaced by a symlink (or a file) is removed, never followed
        "for d in /logs /logs/verifier /tests; do "
        'if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then rm -f "$d"; fi; done && '
        # /tests and /logs may be mount points (bubblewrap binds, pod volumes): empty them, do not remove them
        "mkdir -p /tests /logs/verifier && find /tests /logs/verifier -mindepth 1 -delete && "
        f"if git -C {wd} rev-parse --is-inside-work-tree >/dev/null 2>&1; "
        f"then git -C {wd} add -A >/dev/null 2>&1 || true; fi"
    )
    res = await sandbox.exec(prep, timeout_s=120, cwd="/")
    if res.exit_code != 0:
        return GradeResult(None, False, res.output, VERIFIER_SETUP, f"preparing /tests failed: {res.output[-500:]}",
                           time.monotonic() - t0)
    await sandbox.upload(task.verifier.tests_dir, "/tests")
    # the agent could write to its user site-packages: a .pth there runs in the verifier's Python
    env, prefix, header, stage_s = {"PYTHONNOUSERSITE": "1", **task.verifier.env}, "", "", None
    if cache is not None and cache.dir:
        try:
            test_sh = (task.verifier.tests_dir / "test.sh").read_text(errors="replace")
        except OSError:
            test_sh = ""  # bash reports the missing script itself
        try:
            variables, prefix, header, stage_s = await stage_verifier_cache(
                sandbox, cache, env, test_sh, task.verifier.tests_dir, image_tools)
        # the run's configuration (or a task's malformed PEP 723 block, which uv refuses as well),
        # not this trial's answer: say so, do not guess a reward
        except CacheError as exc:
            return GradeResult(None, False, "", VERIFIER_CACHE, str(exc), time.monotonic() - t0)
        env = variables | env  # the task's own verifier variables win
    files: dict[str, bytes] | None = None  # /logs/verifier as only the verifier saw it
    flags: list[str] = []
    if getattr(getattr(sandbox, "capabilities", None), "private_verifier", False):
        # out of reach of every process the agent left running (they stay: the tests may query them)
        private: VerifierRun = await sandbox.run_verifier(  # type: ignore[attr-defined]
            prefix + "bash /tests/test.sh", timeout_s=task.verifier_timeout_s, cwd=task.workdir,
            env=env or None, output_cap=VERIFIER_OUTPUT_CAP)
        run, files = private.result, private.files
        if private.redirected:
            # /tests or /logs/verifier became a link after the prep removed them: an agent process
            # raced the verifier; it never ran
            return GradeResult(0.0, False, header + private.why, None, None, time.monotonic() - t0, stage_s,
                               flags=[VERIFIER_FILES_FLAG])
        if files is None:
            header += f"[farm verifier] no private namespace ({private.why}): ran like a command\n"
        elif private.why and not run.timed_out:
            header += f"[farm verifier] {private.why}\n"
        linked = bool(files) and (await sandbox.exec(
            "[ -L /logs ] || [ -L /logs/verifier ] && echo linked", timeout_s=60, cwd="/")).stdout.strip() == "linked"
        for name, data in (files or {}).items() if not linked else ():
            # a copy where the verifier's results used to be, for whoever inspects the sandbox;
            # the verdict is read from ``files``, which no agent process could touch
            await sandbox.write_file(f"{VERIFIER_LOGS}/{name}", data)
    else:
        run = await sandbox.exec(prefix + "bash /tests/test.sh", timeout_s=task.verifier_timeout_s, cwd=task.workdir,
                                 env=env or None, merge_stderr=True, output_cap=VERIFIER_OUTPUT_CAP)
    output = header + run.output

    async def read(path: str) -> str | None:
        if files is None:
            return await _read_optional(sandbox, path)
        if not path.startswith(VERIFIER_LOGS + "/"):
            return None
        data = files.get(path[len(VERIFIER_LOGS) + 1:])
        return None if data is None else data.decode("utf-8", errors="replace")

    def result(reward: float | None, error_class: str | None = None, error: str | None = None) -> GradeResult:
        return GradeResult(reward, reward is not None and reward >= 1.0, output, error_class, error,
                           time.monotonic() - t0, stage_s, flags=flags)

    if run.timed_out:
        return result(None, VERIFIER_TIMEOUT, f"tests/test.sh did not finish within {task.verifier_timeout_s:g}s")
    protocol_reward = {"swebench": _swebench_reward, "swebench_pro": _swebench_pro_reward}.get(task.verifier.protocol)
    if protocol_reward is not None:  # the benchmark's own rules on the log test.sh wrote, not a reward file
        reward, error_class, error, summary = await protocol_reward(task, read, flags)
        output += summary + "\n"
        return result(reward, error_class, error)
    marker = task.verifier.success_marker
    if marker and marker not in output:
        return result(None, *_setup_or(run.output, VERIFIER_INCOMPLETE,
                                       f"verifier output lacks the success marker {marker!r}"))
    try:
        reward = parse_reward(
            await read("/logs/verifier/reward.json"),
            await read("/logs/verifier/reward.txt"),
        )
    except RewardError as exc:
        return result(None, *_setup_or(run.output, VERIFIER_NO_REWARD, str(exc)))
    if reward < 1.0:
        if files is None:
            ctrf = await sandbox.stat("/logs/verifier/ctrf.json")
            ctrf_present = ctrf.exists and not ctrf.is_dir
        else:
            ctrf_present = "ctrf.json" in files
        verdict = classify(run.output, reward, ctrf_present=ctrf_present)
        if verdict is not None:
            return result(None, VERIFIER_SETUP, f"the verifier's set-up failed before any test ran "
                          f"(it wrote reward {reward:g}; {verdict.kind}): {verdict.evidence}")
    return result(reward)


async def _swebench_reward(task: Task, read: Callable[[str], Awaitable[str | None]], flags: list[str]
                           ) -> tuple[float | None, str | None, str | None, str]:
    """The swebench package's verdict on the test log eval.sh wrote (farm/grade/swebench.py);
    a log that reports a graded test failed and later passed adds ``test_log@verifier`` to ``flags``."""
    from farm.grade.swebench import grade_log
    from farm.tasks.swebench.task_dir import TEST_LOG

    log = await read(TEST_LOG)
    if log is None:
        return None, VERIFIER_NO_REWARD, f"the evaluation script wrote no {TEST_LOG}", ""
    verdict = grade_log(task.metadata["swebench"], log)  # type: ignore[arg-type]
    if verdict.resolved is None:
        return None, VERIFIER_INCOMPLETE, verdict.status, verdict.summary()
    if verdict.contradicted:
        flags.append(TEST_LOG_FLAG)
    return (1.0 if verdict.resolved else 0.0), None, None, verdict.summary()


async def _swebench_pro_reward(task: Task, read: Callable[[str], Awaitable[str | None]], flags: list[str]
                               ) -> tuple[float | None, str | None, str | None, str]:
    """The instance's parser.py on the run script's logs, by the official rule (farm/grade/swebench_pro.py);
    ``flags``: as _swebench_reward's (none of its own)."""
    from farm.grade.swebench_pro import grade_logs
    from farm.tasks.swebench_pro.task_dir import EXIT_FILE, STDERR_LOG, STDOUT_LOG

    assert task.verifier.tests_dir is not None  # a Pro task is always loaded from its directory
    # the parser is a subprocess (up to minutes on a large log): off the event loop
    verdict = await asyncio.to_thread(grade_logs, task.metadata["swebench_pro"],  # type: ignore[arg-type]
                                      task.verifier.tests_dir / "parser.py", await read(STDOUT_LOG),
                                      await read(STDERR_LOG), await read(EXIT_FILE))
    if verdict.resolved is None:
        return None, VERIFIER_INCOMPLETE, verdict.status, verdict.summary()
    return (1.0 if verdict.resolved else 0.0), None, None, verdict.summary()


def _setup_or(output: str, error_class: str, error: str) -> tuple[str, str]:
    """A run without a valid reward: ``verifier_setup`` when its output shows the set-up
    failing (rule 3 of farm/grade/verifier_setup.py), else ``error_class``."""
    verdict = classify(output, None)
    if verdict is not None:
        return VERIFIER_SETUP, f"{error}, after its set-up failed ({verdict.kind}): {verdict.evidence}"
    return error_class, error
