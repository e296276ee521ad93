"""Print every directory, file and link under a constructed tree, and a hash of it, as JSON.

{"entries": {path: {"mode", "text"} | {"mode"} (a directory) | {"link"}}, "sha256": ...}.
The journal and the host's locks (var/lib/stacktune) are left out: the engine keeps its
record of what it did there on purpose. The hash covers every entry byte for byte, except
that a block queue's scheduler counts by its active choice: a kernel prints the whole
list ("[none] mq-deadline") whatever name was written, a plain file keeps the name.
"""

import hashlib
import json
import os
import re
import sys

root = sys.argv[1]
entries = {}
for base, dirs, files in os.walk(root):
    dirs.sort()
    if os.path.relpath(base, root) == "var/lib":
        dirs[:] = [name for name in dirs if name != "stacktune"]
    for name in dirs + sorted(files):
        path = os.path.join(base, name)
        rel = "/" + os.path.relpath(path, root)
        st = os.lstat(path)
        if os.path.islink(path):
            entries[rel] = {"link": os.readlink(path)}
        elif os.path.isdir(path):
            entries[rel] = {"mode": oct(st.st_mode & 0o7777)}
        else:
            with open(path, encoding="utf-8") as handle:
                entries[rel] = {"mode": oct(st.st_mode & 0o7777), "text": handle.read()}


def hashed(path, entry):
    if path.endswith("/queue/scheduler"):
        match = re.search(r"\[([^\]]+)\]", entry["text"])
        return dict(entry, text=match.group(1) if match else entry["text"].strip())
    return entry


view = {path: hashed(path, entry) for path, entry in entries.items()}
digest = hashlib.sha256(json.dumps(view, sort_keys=True).encode()).hexdigest()
print(json.dumps({"entries": entries, "sha256": digest}, sort_keys=True))
