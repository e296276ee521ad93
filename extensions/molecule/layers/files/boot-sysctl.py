"""Test oracle: what the next boot's sysctl step leaves, in procps' own file order.

``sysctl --system`` (procps) lists the files it applies ("* Applying FILE ...") in the order
it applies them, masking and /etc/sysctl.conf included. The last assignment of each key in
that order is what the boot leaves. /proc/sys is read-only in this container, so the writes
themselves fail; the order is what this oracle takes from procps. Prints JSON.
"""

import json
import subprocess

proc = subprocess.run(["sysctl", "--system"], capture_output=True, text=True, check=False)
files = [
    line[len("* Applying ") : -len(" ...")]
    for line in proc.stdout.splitlines()
    if line.startswith("* Applying ") and line.endswith(" ...")
]
final = {}
for path in files:
    with open(path) as handle:
        for raw in handle:
            line = raw.strip()
            if not line or line[0] in "#;" or "=" not in line:
                continue
            key, value = line.split("=", 1)
            final[key.strip().lstrip("-").strip().replace("/", ".")] = [" ".join(value.split()), path]
print(json.dumps({"files": files, "final": final}))
