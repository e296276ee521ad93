# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The workload program's entry point: one block as the JSON arguments describe it, or the
block runner that forks a fresh process per block. The last part of the assembled program
(``base.py``); ``python program.py '<json>'`` runs it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
import traceback

from ansible_collections.stacktune.gpu.plugins.module_utils.common.hostproc import (
    controller_gone,
    die_with_parent,
    lease_expired,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.base import (
    LIVE,
    LIVE_STEPS,
    WorkloadError,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.live import LiveSession
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.registry import (
    DEFAULT_SIZE,
    DEFAULT_STEPS,
    GPU_WORKLOADS,
    LIVE_SIZE,
    LIVE_WORKLOADS,
    RUNNER_PRELOAD,
    SIZE_MEANING,
    WORKLOAD_FUNCS,
)


def resolve_auto():
    """``gemm`` when this interpreter has a CUDA-enabled torch that sees a GPU, else ``cpu_dataloader``."""
    try:
        import torch  # pylint: disable=import-outside-toplevel

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return "gemm"
    except Exception:  # noqa: BLE001 - a broken torch install means no GPU workload
        pass
    return "cpu_dataloader"


def _default_size(name, live):
    return LIVE_SIZE[name] if live else DEFAULT_SIZE[name]


def run(cfg):
    """Run one block as described by ``cfg`` and return the result document."""
    name = cfg["workload"]
    if name == "auto":
        name = resolve_auto()
    if name not in WORKLOAD_FUNCS:
        raise WorkloadError("unknown workload %r" % name)
    if cfg.get("live"):
        if name not in LIVE_WORKLOADS:
            raise WorkloadError("workload %s cannot run live (it sizes its data per block)" % name)
        if LIVE["out"] is None:
            raise WorkloadError("live mode needs the program's result stream")
        LIVE["stop"] = threading.Event()
        LIVE["max_s"] = cfg.get("max_s")
        signal.signal(signal.SIGTERM, lambda _sig, _frame: LIVE["stop"].set())
    cpus = cfg.get("cpus")
    if cpus:
        try:
            os.sched_setaffinity(0, cpus)
        except (AttributeError, OSError, ValueError) as exc:
            raise WorkloadError("cannot pin the workload to CPUs %s: %s" % (cpus, exc)) from None
    steps = int(cfg["steps"]) if cfg.get("steps") is not None else DEFAULT_STEPS[name]
    params = {
        "steps": LIVE_STEPS if cfg.get("live") else steps,
        "warmup": int(cfg["warmup"]),
        "size": int(cfg["size"]) if cfg.get("size") is not None else _default_size(name, cfg.get("live")),
        "workers": int(cfg.get("workers", 4)),
        "device": int(cfg.get("device", 0)),
        "data_dir": cfg.get("data_dir"),
    }
    t0 = time.perf_counter()
    out = WORKLOAD_FUNCS[name](params)
    out["measure_s"] = round(time.perf_counter() - t0, 3)
    out["workload"] = name
    out["size"] = params["size"]
    out["size_meaning"] = SIZE_MEANING[name]
    out["warmup"] = params["warmup"]
    out["python"] = sys.executable
    out["python_version"] = "%d.%d.%d" % sys.version_info[:3]
    try:
        out["cpus"] = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["cpus"] = None
    return out


# ---------------------------------------------------------------------------------------
# The block runner: a warm parent that forks one fresh process per block.
#
# Started once per tune run, by the first layer measured (bench ``runner_state=started``), it
# imports what the run's workloads import (torch, without initialising CUDA) and then waits on
# a private unix socket; the layers after it find it there (a ``ping``) and use it. Between
# blocks it checks the host's lease: it ends as soon as its run no longer holds it (released,
# taken over, expired, or its controller on this machine is gone).
# Each block it is asked for runs in a child forked for it: a process of its own (its own
# session, CUDA context, NCCL initialisation, its own reading of /etc/nccl.conf, limits and
# /dev/shm), so a block stays the unit of noise; only the interpreter's start and the imports
# are paid once. It ends when asked, when it is idle for ``idle_s``, when its folder is
# removed, or as soon as its run no longer holds the host's lease.


# what _lease_holder says of a record it cannot read (torn mid-write, or by hand): nothing either
# way; the run's own engine calls rewrite it or stop the run, and the runner goes on meanwhile
UNREADABLE = "?"


def _lease_holder(lock_path):
    """The run that holds the host's lease now, or None: none, an expired lease, or one whose
    controller process is known to be gone (a killed ansible-playbook on this machine);
    ``UNREADABLE`` for a record that cannot be parsed."""
    try:
        with open(lock_path) as handle:
            data = json.load(handle)
    except ValueError:
        return UNREADABLE
    except (IOError, OSError):
        return None
    holder = data.get("holder") if isinstance(data, dict) and "holder" in data else data
    if not isinstance(holder, dict) or lease_expired(holder):
        return None
    if controller_gone(holder.get("controller")):
        return None
    return holder.get("run_id")


def _run_child(request, folder, number, listener, conn):
    """In the forked child: one block, its result document to a file, then exit."""
    listener.close()
    conn.close()
    os.setsid()
    die_with_parent()
    os.environ.update({str(k): str(v) for k, v in (request.get("env") or {}).items()})
    out = os.open(os.path.join(folder, "out-%d" % number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    err = os.open(os.path.join(folder, "err-%d" % number), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(err, 2)
    code = 1
    try:
        code = main(["runner", json.dumps(request["args"])])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _answer(conn, doc):
    """Send one answer whole: a live request's wait left the socket non-blocking, where sendall
    gives up on a full buffer half way (the client then sees the runner end)."""
    with contextlib.suppress(OSError):
        conn.settimeout(30)
        conn.sendall((json.dumps(doc) + "\n").encode("utf-8"))


def _client_gone(conn):
    """A function that tells whether the client of ``conn`` has gone (or said anything: a
    live request is given up when the client leaves, its lease lost or its module killed)."""
    conn.setblocking(False)

    def gone():
        try:
            return conn.recv(64) is not None
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            return True

    return gone


def _fork_live(listener, conn):
    """The ``fork_builtin`` of a live session: a built-in workload in live mode, in a forked
    child of its own session that writes its step lines to ``out_fd``."""

    def fork_builtin(args, env, out_fd, err_fd):
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:
            listener.close()
            conn.close()
            os.setsid()
            die_with_parent()
            os.environ.update({str(k): str(v) for k, v in (env or {}).items()})
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            code = main(["runner", json.dumps(dict(args, live=True))])
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    return fork_builtin


def _serve_live(request, listener, conn, folder, live):
    """A live session's requests (``live_start``, ``live_window``, ``live_stop``); ``live`` holds
    the runner's one session (``{"session": LiveSession or None}``)."""
    session = live.get("session")
    if "live_start" in request:
        spec = request["live_start"]
        if session is not None and session.key == spec.get("key") and session.alive():
            _answer(conn, {"reused": True, "pid": session.pid, "steps": len(session.arrivals)})
            return
        if session is not None:
            session.stop()
        started = time.monotonic()
        session = LiveSession(spec, folder, _fork_live(listener, conn))
        live["session"] = session
        session.start()
        bad = session.wait_first(float(spec.get("start_timeout") or 600), _client_gone(conn))
        if bad is not None:
            live["session"] = None
            done = session.stop(grace=1.0)
            bad.update(rc=done["rc"])
            _answer(conn, {"failed": True, "result": bad})
            return
        _answer(conn, {"started": True, "pid": session.pid, "start_s": round(time.monotonic() - started, 3)})
        return
    if "live_stop" in request:
        live["session"] = None
        _answer(conn, {"stopped": True, "result": session.stop() if session is not None else None})
        return
    window = request["live_window"]
    if session is None:
        _answer(conn, {"failed": True, "result": {"failure": "start", "error": "no live session is running"}})
        return
    out = session.window(
        bool(window.get("fresh", True)),
        float(window.get("seconds", 5.0)),
        drop_s=float(window.get("drop_s", 0.0)),
        drop_steps=int(window.get("drop_steps", 0)),
        min_steps=int(window.get("min_steps", 3)),
        hang_s=float(window.get("hang_s", 60.0)),
        gone=_client_gone(conn),
    )
    if "failure" in out:
        if out["failure"] != "gone":
            live["session"] = None
            done = session.stop(grace=1.0)
            out.setdefault("rc", done["rc"])
        _answer(conn, {"failed": True, "result": out})
        return
    _answer(conn, {"window": out})


def _serve_one(listener, conn, folder, number, preloaded=(), live=None):
    """Read one request, fork its block, wait for it (or for a kill), answer with its files.
    A ``ping`` is answered with what this runner imported (a layer of the same run reuses it);
    the live requests go to :func:`_serve_live`. One workload runs at a time: a block ends the
    live session first."""
    live = {} if live is None else live
    conn.settimeout(30)
    raw = b""
    while not raw.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return False
        raw += chunk
    request = json.loads(raw.decode("utf-8"))
    if request.get("stop"):
        conn.sendall(b'{"stopped": true}\n')
        return True
    if request.get("ping"):
        conn.sendall((json.dumps({"pong": True, "preloaded": list(preloaded)}) + "\n").encode("utf-8"))
        return False
    if any(key in request for key in ("live_start", "live_window", "live_stop")):
        _serve_live(request, listener, conn, folder, live)
        conn.setblocking(True)
        return False
    if live.get("session") is not None:
        live.pop("session").stop()
    pid = os.fork()
    if pid == 0:
        _run_child(request, folder, number, listener, conn)
    conn.setblocking(False)
    rc = None
    while rc is None:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            rc = os.waitstatus_to_exitcode(status) if hasattr(os, "waitstatus_to_exitcode") else status >> 8
            break
        try:
            said = conn.recv(64)
        except (BlockingIOError, InterruptedError):
            said = None
        except OSError:
            said = b""
        if said is not None:  # "kill" or the client gone (timeout, lost lease, killed module)
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            rc = -signal.SIGKILL
            break
        time.sleep(0.05)
    conn.setblocking(True)
    answer = {"rc": rc, "out": os.path.join(folder, "out-%d" % number), "err": os.path.join(folder, "err-%d" % number)}
    with contextlib.suppress(OSError):
        conn.sendall((json.dumps(answer) + "\n").encode("utf-8"))
    return False


def runner_preload(workloads):
    """The modules a runner for ``workloads`` imports, in order (none for CPU workloads only):
    torch for every GPU workload, then each one's ``preload`` (registry.py)."""
    names = [w for w in workloads if w in GPU_WORKLOADS or w == "auto"]
    if not names:
        return []
    modules = ["torch"]
    for name in names:
        modules.extend(m for m in RUNNER_PRELOAD.get(name, ()) if m not in modules)
    return modules


def _preload(modules, folder):
    """Import ``modules`` and write what each took to ``ready.json`` in ``folder``."""
    imports = []
    for module in modules:
        t0 = time.perf_counter()
        error = None
        try:
            __import__(module)
        except Exception as exc:  # noqa: BLE001 - a block that needs it reports the error itself
            error = "%s: %s" % (type(exc).__name__, exc)
        imports.append({"module": module, "seconds": round(time.perf_counter() - t0, 3), "error": error})
    with open(os.path.join(folder, "ready.json"), "w") as handle:
        json.dump({"imports": imports}, handle)
    return imports


def serve(cfg):
    """The block runner's loop (see above). ``cfg``: socket, run_id, lock_path, idle_s, preload."""
    folder = os.path.dirname(cfg["socket"])
    imported = [i["module"] for i in _preload(cfg.get("preload") or (), folder) if not i["error"]]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(cfg["socket"] + ".tmp")
    os.chmod(cfg["socket"] + ".tmp", 0o600)
    listener.listen(4)
    os.rename(cfg["socket"] + ".tmp", cfg["socket"])  # there only once it answers
    listener.settimeout(1.0)
    # idle time on the monotonic clock: a wall-clock step (NTP, a resumed VM) ends no runner
    last, number = time.monotonic(), 0
    live = {"session": None}
    try:
        while True:
            if cfg.get("run_id") and _lease_holder(cfg["lock_path"]) not in (cfg["run_id"], UNREADABLE):
                return 0
            if time.monotonic() - last > float(cfg.get("idle_s", 900)) or not os.path.exists(cfg["socket"]):
                return 0
            try:
                conn, _addr = listener.accept()
            except socket.timeout:
                continue
            number += 1
            with conn:
                if _serve_one(listener, conn, folder, number, imported, live):
                    return 0
            last = time.monotonic()
    finally:
        if live.get("session") is not None:
            live["session"].stop(grace=2.0)
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


def main(argv):
    # Keep stdout for the one result document: anything a library prints goes to stderr.
    result_stream = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    code = 0
    try:
        if len(argv) != 2:
            raise WorkloadError("usage: %s '<json arguments>'" % argv[0])
        cfg = json.loads(argv[1])
        if "serve" in cfg:
            return serve(cfg["serve"])
        if cfg.get("live"):
            LIVE["out"] = result_stream
        result = run(cfg)
    except WorkloadError as exc:
        result, code = {"error": str(exc)}, 2
    except Exception as exc:  # noqa: BLE001 - reported as data, the module turns it into fail_json
        result = {"error": "%s: %s" % (type(exc).__name__, exc), "traceback": traceback.format_exc()}
        code = 1
    result_stream.write(json.dumps(result))
    result_stream.write("\n")
    result_stream.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
