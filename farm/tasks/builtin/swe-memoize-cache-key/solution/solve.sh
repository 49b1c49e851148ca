#!/bin/bash
# Reference fix: the key names the function and includes the keyword arguments.
set -euo pipefail
python3 - <<'PY'
from pathlib import Path
path = Path("fxcache/cache.py")
text = path.read_text()
old = '    """The cache key of one call."""\n    return args\n'
new = ('    """The cache key of one call: which function, and every argument it got."""\n'
       '    return (func.__module__, func.__qualname__, args, tuple(sorted(kwargs.items())))\n')
assert old in text, "fxcache/cache.py changed; cannot apply the reference fix"
path.write_text(text.replace(old, new))
PY
