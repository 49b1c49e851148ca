"""Hidden check: rebuild the expected library from a fresh inbox and compare the trees."""

import hashlib
import os
import subprocess
import tempfile


def tree(root):
    files = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as fh:
                files[os.path.relpath(path, root)] = fh.read()
    return files


def ext_of(name):
    stem, dot, ext = name.rpartition(".")
    return ext.lower() if dot and stem and ext else "other"


def numbered(name, n):
    if n == 1:
        return name
    stem, dot, ext = name.rpartition(".")
    if ext_of(name) == "other":
        return f"{name}-{n}"
    return f"{stem}-{n}.{ext}"


def expected_library(inbox):
    groups = {}
    for rel, data in sorted(inbox.items(), key=lambda kv: kv[0].encode()):
        if data:
            groups.setdefault(data, []).append(rel)
    library, manifest, taken = {}, [], {}
    for data, paths in sorted(groups.items(), key=lambda kv: kv[1][0].encode()):
        name = os.path.basename(paths[0])
        folder = ext_of(name)
        n = 1
        while os.path.join(folder, numbered(name, n)) in library:
            n += 1
        dest = os.path.join(folder, numbered(name, n))
        library[dest] = data
        manifest.append((dest, f"{hashlib.sha256(data).hexdigest()}\t{dest}\t{','.join(paths)}"))
    text = "".join(line + "\n" for _, line in sorted(manifest, key=lambda m: m[0].encode()))
    library["manifest.tsv"] = text.encode()
    return library


def checks():
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["bash", "/tests/make_inbox.sh", os.path.join(tmp, "inbox")], check=True)
        pristine = tree(os.path.join(tmp, "inbox"))
    yield "the inbox is unchanged", tree("/app/inbox") == pristine
    want = expected_library(pristine)
    got = tree("/app/library") if os.path.isdir("/app/library") else {}
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    yield f"library has exactly the expected files (missing {missing}, extra {extra})", not missing and not extra
    wrong = sorted(k for k in set(want) & set(got) if k != "manifest.tsv" and want[k] != got[k])
    yield f"library files have the right content (wrong: {wrong})", not wrong
    ok = got.get("manifest.tsv") == want["manifest.tsv"]
    if not ok:
        print("expected manifest:\n" + want["manifest.tsv"].decode())
        print("got:\n" + got.get("manifest.tsv", b"<missing>").decode(errors="replace"))
    yield "manifest.tsv is exact", ok


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
