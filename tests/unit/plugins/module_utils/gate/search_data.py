# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Windows of a search's arms for the replay tests and benchmarks/search_replay.py.

A recording of benchmarks/gpu_timeline.py (tests/unit/fixtures/search/*.json: ``windows``, each
``{"arm", "steps_ms", "energy_mj": [per GPU], "span_s"}``) is read as it is; without one, windows
are built from the curve measured on one H200 (a GPU-bound transformer step, the power limit
switched live: step ms, J/step and window CV per limit, issue 42's table).
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
        for _ in range(windows):
            m = ms * (1.0 + rng.gauss(0.0, cv))
            steps = [m * (1.0 + rng.gauss(0.0, 0.003)) for _ in range(int(seconds * 1000.0 / ms))]
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


def recorded(pattern):
    """Windows per arm of the recordings matching ``pattern`` under the fixtures, or None."""
    paths = sorted(glob.glob(os.path.join(FIXTURES, pattern)))
    if not paths:
        return None
    out = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        for w in doc.get("windows") or []:
            steps = w.get("steps_ms") or w.get("samples_ms")
            if not steps:
                continue
            out.setdefault(_arm_key(w["arm"]), []).append(
                {"samples_ms": steps, "energy_mj": w.get("energy_mj"), "span_s": w.get("span_s")}
            )
    return out or None


def power_windows():
    """The power-limit curve's windows per limit: the recording where there is one."""
    return recorded("*power*.json") or synthetic(H200_CURVE)


def thp_windows():
    """Two arms that do not matter (THP always / never on a GPU-bound step): the recording
    where there is one, else the 700 W arm's noise for both."""
    got = recorded("*thp*.json")
    if got:
        return got
    ms, joules, cv = H200_CURVE[700]
    return synthetic({"always": (ms, joules, cv), "never": (ms, joules, cv)}, seed=7)
