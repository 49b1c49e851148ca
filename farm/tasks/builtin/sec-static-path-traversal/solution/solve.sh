#!/bin/bash
# Reference fix: resolve symlinks and dot segments, then require the result to stay below root.
set -euo pipefail
git apply <<'PATCH'
--- a/staticsrv/files.py
+++ b/staticsrv/files.py
@@ -11,7 +11,10 @@ def resolve(root, request_path):
     path = unquote(request_path.split("?", 1)[0].split("#", 1)[0])
     if path.endswith("/"):
         path += "index.html"
-    candidate = os.path.join(root, path.lstrip("/"))
+    root = os.path.realpath(root)
+    candidate = os.path.realpath(os.path.join(root, path.lstrip("/")))
+    if os.path.commonpath([root, candidate]) != root:
+        raise NotFound(request_path)
     if os.path.isdir(candidate):
         candidate = os.path.join(candidate, "index.html")
     if not os.path.isfile(candidate):
PATCH
