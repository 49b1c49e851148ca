#!/bin/bash
# Reference fix: round the page count up instead of "floor + 1".
set -euo pipefail
git apply <<'PATCH'
--- a/pagekit/paginator.py
+++ b/pagekit/paginator.py
@@ -24,7 +24,7 @@ class Paginator:
         # Items that would end up alone on a short last page ("orphans") are folded into
         # the page before it.
         hits = max(1, self.count - self.orphans)
-        return hits // self.per_page + 1
+        return -(-hits // self.per_page)
 
     @property
     def page_range(self):
PATCH
