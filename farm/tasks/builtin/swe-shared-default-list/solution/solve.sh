#!/bin/bash
# Reference fix: no shared mutable defaults; copy what the caller passes in.
set -euo pipefail
git apply <<'PATCH'
--- a/mailq/message.py
+++ b/mailq/message.py
@@ -10,13 +10,15 @@ def check_address(address):
 
 
 class Message:
-    def __init__(self, subject, body="", recipients=[], headers={}):
+    def __init__(self, subject, body="", recipients=None, headers=None):
         self.subject = subject
         self.body = body
-        self.recipients = recipients
-        self.headers = headers
-        for address in self.recipients:
-            check_address(address)
+        self.recipients = []
+        self.headers = {}
+        for address in recipients or ():
+            self.add_recipient(address)
+        for name, value in (headers or {}).items():
+            self.set_header(name, value)
 
     def add_recipient(self, address):
         address = check_address(address)
PATCH
