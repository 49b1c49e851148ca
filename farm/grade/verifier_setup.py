"""When a verifier's failure is its own set-up, not the agent's answer (``infra_error:verifier_setup``).

Harbor verifiers often fetch their own tools first (``apt-get install curl``, the astral uv
installer, ``uvx -w pytest==...``, ``pip install pytest==...``) and then write reward 0 on
any non-zero exit, so a download that fails looks exactly like a wrong answer. The rules:

1. **Set-up failure evidence** is a line of the verifier output matching one of
   ``SETUP_FAILURES``: a tool download or install that failed (curl could not resolve or
   reach a host, ``uv``/``uvx``/``pip``/``pytest``/``curl`` not found, the uv env file absent,
   uv finding no interpreter or failing to download or resolve, pip finding no distribution,
   an ``E:`` line of apt that could not locate or fetch a package). apt-get update's ``W:`` /
   ``Err:`` lines alone are not evidence: the packages may already be installed.
2. **Tests-ran evidence** is a line matching ``TESTS_RAN`` (pytest's ``collected N items``,
   a ``== N passed/failed ... ==`` summary, ``== FAILURES ==`` / ``== ERRORS ==``, a
   ``PASSED|FAILED|ERROR path::test`` short-summary line) or a CTRF report in /logs/verifier.
3. A run with **no valid reward** (missing or unparseable reward file) and set-up evidence
   is ``verifier_setup``; without evidence it stays ``verifier_no_reward``.
4. A run with **reward < 1**, set-up evidence and **no** tests-ran evidence is
   ``verifier_setup``; once tests ran, reward 0 is the agent's (``unresolved``). A reward of 1
   is never overridden.

The last matching line (the failure that stopped the verifier) is quoted in the row's error,
so a reader can check the verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOOLS = r"(?:uv|uvx|pip|pip3|pytest|curl|wget|python|python3(?:\.\d+)?)"
SETUP_FAILURES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx, re.M)) for name, rx in (
        ("curl", r"^curl: \((?:5|6|7|28|35|56|60)\) .*$"),  # resolve / connect / timeout / TLS / recv
        ("curl", r"^curl: \(22\) The requested URL returned error.*$"),
        ("wget", r"^wget: unable to resolve host address.*$"),
        ("not_found", rf"^.*\b{_TOOLS}: (?:command )?not found$"),
        ("not_found", r"^.*/\.local/bin/env: No such file or directory$"),
        ("uv", r"^(?:error: )?No interpreter found for Python.*$"),
        ("uv", r"^(?:error|  Caused by): Failed to (?:download|fetch).*$"),
        ("uv", r"^.*was not found in the (?:package registry|provided package locations).*$"),
        ("uv", r"^.*Network connectivity is disabled.*$"),
        ("uv", r"^\s*× No solution found when resolving.*$"),
        ("uv", r"^error: Request failed after \d+ retr.*$"),
        ("pip", r"^ERROR: Could not find a version that satisfies the requirement.*$"),
        ("pip", r"^ERROR: No matching distribution found for.*$"),
        ("pip", r"^error: externally-managed-environment$"),
        ("apt", r"^E: (?:Unable to locate package|Package '.*' has no installation candidate|Failed to fetch).*$"),
        ("apt", r"^E: .*Temporary failure resolving.*$"),
    )
)
TESTS_RAN: tuple[re.Pattern[str], ...] = tuple(re.compile(rx, re.M) for rx in (
    r"^collected \d+ items?\b",
    r"^=+ .*\b\d+ (?:passed|failed|errors?|skipped|xfailed|xpassed|deselected)\b.* =+$",
    r"^=+ no tests ran\b.*=+$",
    r"^=+ (?:FAILURES|ERRORS) =+$",
    r"^(?:PASSED|FAILED|ERROR|XFAIL|XPASS) \S+::\S+",
))


@dataclass(frozen=True)
class SetupVerdict:
    evidence: str  # the first output line that shows the set-up failing
    kind: str  # which rule family matched (curl, not_found, uv, pip, apt ...)


def setup_failure(output: str) -> SetupVerdict | None:
    """The last line of ``output`` that shows a tool download or install failing: the one that
    stopped the verifier (an earlier one, such as the uv installer's download when uv was
    staged anyway, may have been harmless)."""
    best: tuple[int, SetupVerdict] | None = None
    for kind, rx in SETUP_FAILURES:
        for m in rx.finditer(output):
            if best is None or m.start() > best[0]:
                best = (m.start(), SetupVerdict(m.group(0).strip()[:300], kind))
    return best[1] if best else None


def tests_ran(output: str, ctrf_present: bool = False) -> bool:
    return ctrf_present or any(rx.search(output) for rx in TESTS_RAN)


def classify(output: str, reward: float | None, *, ctrf_present: bool = False) -> SetupVerdict | None:
    """``verifier_setup`` evidence for this run (rules 3 and 4 above), or None when the verdict stands.

    ``reward`` is None when the verifier produced no valid reward."""
    if reward is not None and reward >= 1.0:
        return None
    verdict = setup_failure(output)
    if verdict is None:
        return None
    if reward is not None and tests_ran(output, ctrf_present):
        return None
    return verdict
