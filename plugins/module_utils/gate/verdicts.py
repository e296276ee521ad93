# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What both of the gate's judges share: the policies, the verdict of a ratio against its
tolerance, the range check of a setting and the rounding and wording of numbers.

The block gate (``gate/blocks.py``) and the step-level judge (``gate/steps.py``) import these; neither
imports the other's private names.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import numbers

POLICIES = ("improve", "no_regression")


def sig(x, digits=6):
    """Round to ``digits`` significant digits (JSON-friendly floats)."""
    if x is None:
        return None
    if x == 0 or not math.isfinite(x):
        return float(x)
    return float("%.*g" % (digits, x))


def quantile_label(q):
    """``0.99`` -> ``"p99"``, ``0.999`` -> ``"p99.9"``, ``0.5`` -> ``"p50"``."""
    return "p%s" % ("%.6g" % (q * 100.0))


def check_unit_interval(name, value, low, high, low_open=True, high_open=True):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError("%s must be a number, got %r" % (name, value))
    too_low = value <= low if low_open else value < low
    too_high = value >= high if high_open else value > high
    if too_low or too_high:
        raise ValueError(
            "%s must be in %s%g, %g%s, got %r"
            % (name, "(" if low_open else "[", low, high, ")" if high_open else "]", value)
        )
    return float(value)


def latency_verdict(ratio, ci, band):
    lo, hi = ci
    if lo > 1.0 + band:
        return "worse"
    if hi < 1.0 and ratio <= 1.0 - band:
        return "better"
    if hi <= 1.0 + band:
        return "same"
    return "unknown"


def throughput_verdict(ratio, ci, band):
    lo, hi = ci
    if hi < 1.0 - band:
        return "worse"
    if lo > 1.0 and ratio >= 1.0 + band:
        return "better"
    if lo >= 1.0 - band:
        return "same"
    return "unknown"


def ms(v):
    return "%.3g" % v if v < 100 else "%.1f" % v
