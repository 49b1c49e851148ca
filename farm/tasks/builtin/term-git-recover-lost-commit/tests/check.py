"""Hidden check for the lost-commit task: inspect /app/recipes with git."""

import os
import subprocess

REPO = "/app/recipes"
# "Fix typo in pancakes": the tip of main when the task started (dates are fixed by setup.sh).
OLD_MAIN = "1bb7f6c957a717c8b38672965d71b221ab3f33b8"
SOUP = """# Tomato soup

- 1 kg ripe tomatoes
- 1 onion, 2 cloves garlic
- 500 ml vegetable stock
- basil, salt, olive oil

Soften onion and garlic in oil, add tomatoes and stock, simmer 25 minutes,
blend, season. Serve with basil.
"""
INDEX = "# Index\n\n- [Pancakes](pancakes.md)\n- [Tomato soup](soup.md)\n"


def git(*args):
    proc = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
    return proc.returncode, proc.stdout


def checks():
    code, branch = git("symbolic-ref", "--short", "HEAD")
    yield "HEAD is on branch main", code == 0 and branch.strip() == "main"
    code, _ = git("merge-base", "--is-ancestor", OLD_MAIN, "main")
    yield "the old tip of main is still in main's history", code == 0
    code, soup = git("show", "main:soup.md")
    yield "main:soup.md is the recovered recipe", code == 0 and soup == SOUP
    code, index = git("show", "main:index.md")
    yield "main:index.md lists pancakes and soup", code == 0 and index == INDEX
    code, pancakes = git("show", "main:pancakes.md")
    yield "the pancakes typo fix is kept", code == 0 and "20 minutes" in pancakes and "minuets" not in pancakes
    code, status = git("status", "--porcelain")
    yield "the working tree is clean", code == 0 and status.strip() == ""


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
