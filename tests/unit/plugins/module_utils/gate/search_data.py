# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Windows of a search's arms for the replay tests and benchmarks/search_replay.py.

Recordings of benchmarks/gpu_timeline.py on one H200 (tests/unit/fixtures/search/ the power
curve, tests/unit/fixtures/settle/ THP and vm.dirty_ratio arms: ``windows``, each ``{"arm",
"steps_ms", "energy_mj": [per GPU], "span_s"}``) are read as they are. Windows are also built
from the curve of issue 42's table (another GPU-bound transformer step on one H200: step ms,
J/step and window CV per limit), on which the issue set its targets.
"""

import glob
import json
import os
import random

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "search")

# limit W: (step ms, J per step, window CV) measured on one H200
H200_CURVE = {
    700: (51.43, 35.29, 0.0010),
    650: (52.68, 33.93, 0.0024),
    600: (54.49, 32.70, 0.0031),
    550: (56.84, 30.92, 0.0043),
    500: (59.89, 29.51, 0.0016),
    450: (62.79, 27.80, 0.0017),
    400: (70.03, 27.79, 0.0030),
    350: (83.81, 29.21, 0.0041),
}


def synthetic(curve, windows=12, seconds=3.0, seed=42):
    """Windows per arm from ``{arm: (step ms, J/step, window CV)}``: each window's mean step and
    energy per step drawn with the window CV, its steps spread 0.3% around its mean."""
    rng = random.Random(seed)
    out = {}
    for arm, (ms, joules, cv) in curve.items():
        out[arm] = []
        for _window in range(windows):
            m = ms * (1.0 + rng.gauss(0.0, cv))
            steps = [m * (1.0 + rng.gauss(0.0, 0.003)) for _step in range(int(seconds * 1000.0 / ms))]
            j = joules * (1.0 + rng.gauss(0.0, cv))
            out[arm].append(
                {"samples_ms": steps, "energy_mj": [j * len(steps) * 1000.0], "span_s": sum(steps) / 1000.0}
            )
    return out


def _arm_key(arm):
    try:
        return int(arm)
    except (TypeError, ValueError):
        return arm


def recorded(pattern, folder=FIXTURES, rename=None):
    """Windows per arm of the recordings matching ``pattern`` in ``folder``, or None; ``rename``
    maps a recorded arm's name to the one used here (arms not in it are left out)."""
    paths = sorted(glob.glob(os.path.join(folder, pattern)))
    if not paths:
        return None
    out = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for w in doc.get("windows") or []:
            steps = w.get("steps_ms") or w.get("samples_ms")
            arm = _arm_key(w["arm"]) if rename is None else rename.get(w["arm"])
            if not steps or arm is None:
                continue
            out.setdefault(arm, []).append(
                {"samples_ms": steps, "energy_mj": w.get("energy_mj"), "span_s": w.get("span_s")}
            )
    return out or None


def table_windows():
    """Windows built from issue 42's table (the curve the targets were set on)."""
    return synthetic(H200_CURVE)


def power_windows():
    """The power-limit curve's windows per limit: the recording where there is one."""
    return recorded("*power*.json") or table_windows()


SETTLE = os.path.join(FIXTURES, "..", "settle")


def thp_windows():
    """Two arms that do not matter (THP always / never on a GPU-bound step): the recording
    where there is one, else the 700 W arm's noise for both."""
    got = recorded("*thp*.json", SETTLE, {"thp_always": "always", "thp_never": "never"})
    if got:
        return got
    ms, joules, cv = H200_CURVE[700]
    return synthetic({"always": (ms, joules, cv), "never": (ms, joules, cv)}, seed=7)


def dirty_windows():
    """vm.dirty_ratio 10 / 40 on the same GPU-bound step (recorded; None without the recording)."""
    return recorded("*thp*.json", SETTLE, {"dirty_10": 10, "dirty_40": 40})
