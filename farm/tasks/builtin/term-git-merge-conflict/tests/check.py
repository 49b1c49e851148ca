"""Hidden check for the merge task: history, tree state and behaviour of /app/tempconv."""

import os
import subprocess

REPO = "/app/tempconv"
MAIN_BEFORE = "2211045178c2a6b2ad70869327e46de2620c62c6"     # fixed by setup.sh's dates
FEATURE = "d91ff4423d93b2dd645a67fcc93d910706e258e1"
TEST_FILES = ("tests/test_basic.py", "tests/test_kelvin.py", "tests/test_format.py")


def run(*argv, **kw):
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, **kw)
    if proc.returncode:
        print((proc.stdout + proc.stderr)[-2000:])
    return proc.returncode, proc.stdout


def checks():
    code, branch = run("git", "symbolic-ref", "--short", "HEAD")
    yield "HEAD is on branch main", code == 0 and branch.strip() == "main"
    for name, commit in (("main", MAIN_BEFORE), ("feature/kelvin", FEATURE)):
        code, _ = run("git", "merge-base", "--is-ancestor", commit, "main")
        yield f"the old tip of {name} is in main's history", code == 0
    code, parents = run("git", "log", "--merges", "--format=%P", "main")
    yield "main has a merge commit joining both tips", any(
        {MAIN_BEFORE, FEATURE} <= set(line.split()) for line in parents.splitlines())
    code, status = run("git", "status", "--porcelain")
    yield "the working tree is clean", code == 0 and status.strip() == ""
    code, markers = run("git", "grep", "-n", "-E", "^(<<<<<<<|=======|>>>>>>>)", "main", "--")
    yield "no conflict markers in main", code == 1 and not markers
    code, files = run("git", "ls-tree", "-r", "--name-only", "main")
    yield "tests from both branches are kept", code == 0 and all(f in files.split("\n") for f in TEST_FILES)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    code, _ = run("python3", "-m", "unittest", "discover", "-s", "tests", "-t", ".", env=env)
    yield "the repository's tests pass", code == 0
    code, _ = run("python3", "/tests/test_merged.py", env=dict(env, PYTHONPATH=REPO))
    yield "format_temp behaves as specified", code == 0


def main():
    ok = True
    for name, passed in checks():
        print(("PASS " if passed else "FAIL ") + name)
        ok = ok and passed
    os.makedirs("/logs/verifier", exist_ok=True)
    with open("/logs/verifier/reward.txt", "w") as fh:
        fh.write("1\n" if ok else "0\n")


if __name__ == "__main__":
    main()
