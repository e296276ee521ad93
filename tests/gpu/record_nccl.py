# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record NCCL's transport choice on this host, as is and with faults injected through NCCL's own switches.

Each case is written as a fixture (tests/unit/fixtures/nccl/<prefix>_<case>.json) holding the
raw output of the ranks and the verdict the injected fault must produce: the expectation
comes from the injection, not from the code under test. Run from the repository root on a
host with 2+ GPUs:

    PYTHONPATH=collections python3 tests/gpu/record_nccl.py /opt/torch/.venv/bin/python3 h200x2
"""

from __future__ import absolute_import, division, print_function

import json
import os
import sys

from ansible_collections.stacktune.gpu.plugins.module_utils.hardware.nccl_transport import parse, run, verdict

CASES = (
    ("as_is", {}, "pass", ["P2P"]),
    ("p2p_disabled", {"NCCL_P2P_DISABLE": "1"}, "warning", ["SHM"]),
    ("p2p_shm_disabled", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"}, "critical", ["NET"]),
)


def main(argv):
    python, prefix = argv[1], argv[2]
    out_dir = argv[3] if len(argv) > 3 else "tests/unit/fixtures/nccl"
    os.makedirs(out_dir, exist_ok=True)
    failures = 0
    for name, env, want, transports in CASES:
        ran = run(python, 8, env, 300)
        parsed = parse(ran["output"])
        judged = verdict(parsed, ran["rc"], ran["timed_out"])
        got = sorted({t for p in parsed["pairs"] for t in p["transport"]})
        ok = judged["verdict"] == want and got == transports
        failures += not ok
        print(
            "%-18s env=%s rc=%s verdict=%s (want %s) transports=%s (want %s) %s | %s"
            % (
                name,
                env,
                ran["rc"],
                judged["verdict"],
                want,
                got,
                transports,
                "OK" if ok else "MISMATCH",
                judged["summary"],
            )
        )
        lines = [line for line in ran["output"].splitlines() if "NCCL INFO" in line or line.startswith("STACKTUNE_")]
        record = {
            "host": prefix,
            "case": name,
            "env": env,
            "rc": ran["rc"],
            "timed_out": ran["timed_out"],
            "output": "\n".join(lines[:400]) + "\n",
            "expect": {"verdict": want, "transports": transports},
        }
        with open(os.path.join(out_dir, "%s_%s.json" % (prefix, name)), "w") as handle:
            json.dump(record, handle, indent=1, sort_keys=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
