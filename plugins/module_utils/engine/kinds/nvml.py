# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``nvml``: a GPU setting applied through NVML (pynvml from nvidia-ml-py).

Fields: ``persistence_mode`` (bool), ``power_limit_w`` (watts), ``compute_mode``
(default | exclusive_process | prohibited), ``app_clocks`` ("<memory MHz>,<graphics MHz>").
``gpu`` is an index or ``all``. Requested values are checked against what NVML says the
GPU supports before anything is written. NVML settings do not survive a driver reload,
so they have no persisted form: drift runs verify and re-apply them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import writers
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    Kind,
    SpecError,
    Unsupported,
    setting,
)

FIELDS = ("persistence_mode", "power_limit_w", "compute_mode", "app_clocks")
COMPUTE_MODES = {"default": 0, "prohibited": 2, "exclusive_process": 3}


class NvmlSession(object):
    """A lazily initialised NVML session; raises Unsupported when NVML cannot be used."""

    def __init__(self):
        self._nvml = None
        self._error = None

    def lib(self):
        if self._nvml is not None:
            return self._nvml
        if self._error is not None:
            raise Unsupported(self._error)
        try:
            import pynvml  # pylint: disable=import-outside-toplevel

            pynvml.nvmlInit()
        except ImportError:
            self._error = "pynvml is not importable by this Python (install nvidia-ml-py)"
            raise Unsupported(self._error) from None
        except Exception as exc:  # pynvml raises NVMLError subclasses; any of them means no NVML here
            self._error = "NVML could not be initialised: %s" % exc
            raise Unsupported(self._error) from None
        self._nvml = pynvml
        return pynvml

    def count(self):
        return self.lib().nvmlDeviceGetCount()

    def handle(self, index):
        return self.lib().nvmlDeviceGetHandleByIndex(index)


def _session(ctx):
    """The run's NVML session, created on first use."""
    if ctx.nvml_session is None:
        ctx.nvml_session = NvmlSession()
    return ctx.nvml_session


def _call(session, what, *args):
    nvml = session.lib()
    try:
        return getattr(nvml, what)(*args)
    except nvml.NVMLError as exc:
        raise Unsupported("NVML %s: %s" % (what, exc)) from None


class NvmlKind(Kind):
    name = "nvml"
    # power limit and application clocks hold for the kernels a running process launches next
    # (a 700 -> 450 W switch read as 1.19x in every 3-second window of one process on an H200,
    # docs/gate.md); the compute mode only for CUDA contexts created after it
    running = True
    settle_s = 0.1

    def seen_running(self, s):
        return s.get("field") != "compute_mode"

    def other_writers(self, settings, ctx):
        ids = [s["id"] for s in settings if s.get("field") == "persistence_mode"]
        note = writers.persistenced(ctx) if ids else None
        return [{"tool": "nvidia-persistenced", "message": note, "ids": ids}] if note else []

    def expand(self, spec, ctx):
        field = spec.get("key")
        if field not in FIELDS:
            raise SpecError("nvml key %r is not one of %s" % (field, ", ".join(FIELDS)))
        if spec.get("value") is None:
            raise SpecError("nvml %s needs 'value'" % field)
        if ctx.alternate_root:
            raise Unsupported("alternative root: NVML settings apply to the running host only")
        session = _session(ctx)
        count = session.count()
        gpu = spec.get("gpu", "all")
        if gpu == "all":
            indices = list(range(count))
        else:
            try:
                indices = [int(gpu)]
            except (TypeError, ValueError):
                raise SpecError("nvml gpu must be an index or 'all', got %r" % (gpu,)) from None
            if not 0 <= indices[0] < count:
                raise SpecError("nvml gpu %d does not exist (this host has %d GPUs)" % (indices[0], count))
        out = []
        for index in indices:
            value = self._validate(session, index, field, spec["value"])
            out.append(setting(self.name, "gpu%d:%s" % (index, field), value, gpu=index, field=field))
        return out

    def _validate(self, session, index, field, value):
        handle = session.handle(index)
        if field == "persistence_mode":
            if not isinstance(value, bool):
                raise SpecError("nvml persistence_mode must be true or false, got %r" % (value,))
            return value
        if field == "power_limit_w":
            try:
                watts = int(value)
            except (TypeError, ValueError):
                raise SpecError("nvml power_limit_w must be a whole number of watts, got %r" % (value,)) from None
            low, high = _call(session, "nvmlDeviceGetPowerManagementLimitConstraints", handle)
            if not low // 1000 <= watts <= high // 1000:
                raise SpecError(
                    "nvml power_limit_w %d W is outside GPU %d's supported range %d-%d W"
                    % (watts, index, low // 1000, high // 1000)
                )
            return watts
        if field == "compute_mode":
            if value not in COMPUTE_MODES:
                raise SpecError("nvml compute_mode %r is not one of %s" % (value, ", ".join(sorted(COMPUTE_MODES))))
            return value
        try:
            mem, sm = [int(x) for x in str(value).split(",")]
        except ValueError:
            raise SpecError("nvml app_clocks must be '<memory MHz>,<graphics MHz>', got %r" % (value,)) from None
        supported_mem = _call(session, "nvmlDeviceGetSupportedMemoryClocks", handle)
        if mem not in supported_mem:
            raise SpecError(
                "nvml app_clocks memory %d MHz is not supported by GPU %d: %s" % (mem, index, supported_mem)
            )
        supported_sm = _call(session, "nvmlDeviceGetSupportedGraphicsClocks", handle, mem)
        if sm not in supported_sm:
            raise SpecError(
                "nvml app_clocks graphics %d MHz is not supported by GPU %d at memory %d MHz" % (sm, index, mem)
            )
        return "%d,%d" % (mem, sm)

    def read_live(self, s, ctx):
        session = _session(ctx)
        nvml = session.lib()
        handle = session.handle(s["gpu"])
        field = s["field"]
        if field == "persistence_mode":
            return _call(session, "nvmlDeviceGetPersistenceMode", handle) == nvml.NVML_FEATURE_ENABLED
        if field == "power_limit_w":
            return int(round(_call(session, "nvmlDeviceGetPowerManagementLimit", handle) / 1000.0))
        if field == "compute_mode":
            mode = _call(session, "nvmlDeviceGetComputeMode", handle)
            names = {v: k for k, v in COMPUTE_MODES.items()}
            return names.get(mode, "mode_%s" % mode)
        mem = _call(session, "nvmlDeviceGetApplicationsClock", handle, nvml.NVML_CLOCK_MEM)
        sm = _call(session, "nvmlDeviceGetApplicationsClock", handle, nvml.NVML_CLOCK_GRAPHICS)
        return "%d,%d" % (mem, sm)

    def same(self, a, b):
        return a == b

    def live_writable(self, s, ctx):
        if os.geteuid() != 0:
            return False, "NVML settings need root"
        return True, None

    def write_live(self, s, value, ctx):
        session = _session(ctx)
        nvml = session.lib()
        handle = session.handle(s["gpu"])
        field = s["field"]
        try:
            if field == "persistence_mode":
                nvml.nvmlDeviceSetPersistenceMode(
                    handle, nvml.NVML_FEATURE_ENABLED if value else nvml.NVML_FEATURE_DISABLED
                )
            elif field == "power_limit_w":
                nvml.nvmlDeviceSetPowerManagementLimit(handle, int(value) * 1000)
            elif field == "compute_mode":
                nvml.nvmlDeviceSetComputeMode(handle, COMPUTE_MODES[value])
            else:
                mem, sm = [int(x) for x in str(value).split(",")]
                nvml.nvmlDeviceSetApplicationsClocks(handle, mem, sm)
        except nvml.NVMLError as exc:
            raise OSError("NVML refused %s=%s on GPU %d: %s" % (field, value, s["gpu"], exc)) from None
