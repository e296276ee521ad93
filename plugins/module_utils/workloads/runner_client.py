# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block runner's client side: requests over its unix socket, live sessions among them.

The runner (``workloads/host/program.py``) serves one request at a time on a private socket. A
request is one JSON line and its answer one JSON line. A long request (a block, a live
window, a live start) is waited on with the run's lease checked every ``tick_s``: when the
run no longer holds the host the connection is closed, and the runner gives the request up
(it kills a block; a live window is abandoned, and the runner itself ends on the lost lease).

The bench module's side of the runner is here too: starting one (``start_runner``, in a
private folder under /run, sweeping the folders of runners that are gone), reusing or
replacing it (``ensure_runner``), stopping it, one block in it (``run_in_runner``) and a live
session's requests (``live_request``). Failures are raised as ``BenchFailure``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import stat
import sys
import tempfile
import time

from ansible_collections.stacktune.gpu.plugins.module_utils.common import process
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.fileops import read_text
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import HostLocked, RunLock, lease_ticker
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.lock import LeaseRenewalFailed
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.bench import (
    BenchFailure,
    last_line,
    program_args,
    tail,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.host.program import runner_preload
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import PROGRAM_NAME, program_source

RUNNER_START_TIMEOUT_S = 180
RUNNER_IDLE_S = 900
# How often a running block checks that its run still holds the host (it renews the lease,
# which is minutes long, every 20 s of those checks).
LEASE_TICK_S = 1.0


class RunnerError(Exception):
    """The runner could not be reached or ended while a request was waited on."""


def ask_runner(sock, request, timeout=10):
    """One request to the runner at ``sock`` and its one-line answer, decoded; OSError or
    ValueError when nothing answers there."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(sock)
        conn.sendall((json.dumps(request) + "\n").encode("utf-8"))
        raw = b""
        while not raw.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            raw += chunk
    return json.loads(raw.decode("utf-8"))


def ask_waiting(sock, request, timeout, renew=None, tick_s=1.0, on_timeout=None):
    """A long request: its answer, with ``renew()`` called every ``tick_s`` while it is waited on
    (it raises to give the request up). Past ``timeout`` s, ``on_timeout(conn)`` is called once
    (a block is told to be killed) or, without it, RunnerError is raised."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
    except OSError as exc:
        conn.close()
        raise RunnerError("Failed to reach the block runner at %s: %s" % (sock, exc)) from None
    with conn:
        conn.sendall((json.dumps(request) + "\n").encode("utf-8"))
        deadline, answer, late = time.monotonic() + timeout, b"", False
        while not answer.endswith(b"\n"):
            ready, _w, _x = select.select([conn], [], [], tick_s)
            if ready:
                chunk = conn.recv(65536)
                if not chunk:
                    raise RunnerError("the block runner at %s ended" % sock)
                answer += chunk
                continue
            if renew is not None:
                renew()
            if time.monotonic() > deadline and not late:
                late = True
                if on_timeout is None:
                    raise RunnerError("the block runner at %s did not answer within %d s" % (sock, timeout))
                on_timeout(conn)
    return json.loads(answer.decode("utf-8")), late


def live_key(spec):
    """What makes two live sessions the same one: a later layer reuses a session of equal key."""
    return json.dumps(
        {"command": spec.get("command"), "args": spec.get("args"), "env": spec.get("env")}, sort_keys=True
    )


def live_start(sock, spec, timeout, renew=None):
    """Start (or reuse) the runner's live session; ``(answer, failure or None)``."""
    request = dict(spec, key=live_key(spec), start_timeout=timeout)
    answer, _late = ask_waiting(sock, {"live_start": request}, timeout + 30, renew)
    return answer, (answer.get("result") if answer.get("failed") else None)


def live_window(sock, window, timeout, renew=None):
    """One window of the live session: ``(window, failure or None)``."""
    answer, _late = ask_waiting(sock, {"live_window": window}, timeout, renew)
    if answer.get("failed"):
        return None, answer.get("result") or {"failure": "error", "error": "the window failed"}
    return answer["window"], None


def live_stop(sock, timeout=60):
    """End the runner's live session; what the program said when it ended (or None)."""
    answer, _late = ask_waiting(sock, {"live_stop": True}, timeout)
    return answer.get("result")


# --------------------------------------------------------------------------- the runner's life, a block in it


RUNNER_PREFIX = "stacktune-runner-"


def sweep_runner_folders(base):
    """Remove the folders of runners that are gone (killed with SIGKILL, their host's power cut
    short of a reboot): this user's, whose socket no runner answers on any more. A folder with
    no socket yet is a runner still starting, for RUNNER_START_TIMEOUT_S: it is left alone."""
    removed = []
    for name in os.listdir(base):
        if not name.startswith(RUNNER_PREFIX):
            continue
        path = os.path.join(base, name)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue  # a runner that stopped between the listing and this look removed its own folder
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            continue  # a link, a file, or another user's folder
        sock = os.path.join(path, "runner.sock")
        if not os.path.lexists(sock) and time.time() - info.st_mtime < RUNNER_START_TIMEOUT_S:
            continue  # a runner being started (its socket comes when it is ready): another run's
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(0.5)
            try:
                probe.connect(sock)
                continue  # a runner answers there: another run's, or this one's
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            except OSError:
                continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def runner_folder():
    """A private folder (0700) for a runner's socket, program and block outputs."""
    base = "/run" if os.access("/run", os.W_OK) else tempfile.gettempdir()
    sweep_runner_folders(base)
    folder = tempfile.mkdtemp(prefix=RUNNER_PREFIX, dir=base)
    os.chmod(folder, 0o700)
    return folder


def start_runner(params):
    """Start a block runner for ``python`` and wait until it answers; return the module result."""
    python = params["python"] or sys.executable
    folder = runner_folder()
    program = os.path.join(folder, PROGRAM_NAME)
    fd = os.open(program, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(program_source())
    sock = os.path.join(folder, "runner.sock")
    cfg = {
        "serve": {
            "socket": sock,
            "run_id": params["run_id"],
            "lock_path": RunLock().path,
            "idle_s": RUNNER_IDLE_S,
            "preload": runner_preload(params["runner_workloads"] or [params["workload"]]),
        }
    }
    started = time.monotonic()
    try:
        proc = process.start_detached([python, program, json.dumps(cfg)], folder, os.path.join(folder, "runner.log"))
    except OSError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise BenchFailure("Failed to start the block runner with %s: %s" % (python, exc), failure="start") from None
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() - started > RUNNER_START_TIMEOUT_S:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            text = read_text(os.path.join(folder, "runner.log")) or ""
            shutil.rmtree(folder, ignore_errors=True)
            raise BenchFailure(
                "Failed to start the block runner with %s: %s" % (python, last_line(text) or "it did not answer"),
                failure="start",
            )
        time.sleep(0.05)
    try:
        with open(os.path.join(folder, "ready.json")) as handle:
            imports = json.load(handle).get("imports") or []
    except (IOError, OSError, ValueError):
        imports = []
    return {
        "changed": False,
        "runner_socket": sock,
        "runner_start_s": round(time.monotonic() - started, 2),
        "runner_imports": imports,
        "workload": params["workload"],
    }


def runner_answers(sock, modules):
    """Whether a runner answers at ``sock`` having imported every one of ``modules``:
    ``(answers, covers)``."""
    try:
        answer = ask_runner(sock, {"ping": True})
    except (OSError, ValueError):
        return False, False
    if not isinstance(answer, dict) or not answer.get("pong"):
        return False, False
    return True, set(modules) <= set(answer.get("preloaded") or [])


def ensure_runner(params):
    """The runner at ``runner_socket`` when it answers with the imports the workloads need
    (a layer of the same run started it), else a new one (the old one, if any, is stopped)."""
    sock = params.get("runner_socket")
    if sock:
        answers, covers = runner_answers(sock, runner_preload(params["runner_workloads"] or [params["workload"]]))
        if answers and covers:
            return {
                "changed": False,
                "runner_socket": sock,
                "runner_reused": True,
                "runner_start_s": 0.0,
                "runner_imports": [],
                "workload": params["workload"],
            }
        if answers:
            stop_runner(sock)
    return start_runner(params)


def stop_runner(sock, wait_s=10.0):
    """Ask the runner at ``sock`` to end and wait, ``wait_s`` at most, until it has removed its
    socket (it answers first, then removes its folder); a runner already gone is fine. So a run
    that stopped its runner leaves no runner behind when it ends."""
    asked = False
    with contextlib.suppress(OSError, ValueError):
        ask_runner(sock, {"stop": True})
        asked = True
    deadline = time.monotonic() + wait_s
    while asked and os.path.lexists(sock) and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"changed": False, "runner_socket": sock, "stopped": True}


def run_in_runner(params, args, env, renew):
    """One block in the runner: ``(rc, stdout, stderr)`` as a fresh process would give them."""
    sock, timeout = params["runner_socket"], params["timeout"]
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(sock)
    except OSError as exc:
        conn.close()
        raise BenchFailure("Failed to reach the block runner at %s: %s" % (sock, exc), failure="start") from None
    with conn:
        conn.sendall((json.dumps({"args": args, "env": env}) + "\n").encode("utf-8"))
        deadline, answer, killed = time.monotonic() + timeout, b"", False
        while not answer.endswith(b"\n"):
            ready, _w, _x = select.select([conn], [], [], LEASE_TICK_S)
            if ready:
                chunk = conn.recv(65536)
                if not chunk:
                    raise BenchFailure("Failed to run a block: the block runner at %s ended" % sock, failure="start")
                answer += chunk
                continue
            if renew is not None:
                renew()  # HostLocked: leaving closes the socket, and the runner kills the block
            if time.monotonic() > deadline and not killed:
                conn.sendall(b"kill\n")
                killed = True
    done = json.loads(answer.decode("utf-8"))
    out = read_text(done["out"]) or ""
    err = read_text(done["err"]) or ""
    for path in (done["out"], done["err"]):
        with contextlib.suppress(OSError):
            os.unlink(path)
    if killed:
        raise BenchFailure(
            "Failed to run workload %s: still running after timeout=%d s, killed it and its children"
            % (params["workload"], timeout),
            failure="hang",
            error_line="still running after %d s" % timeout,
            stderr_tail=tail(err),
        )
    return done["rc"], out, err


def live_request(params):
    """A live session's request (``live``): start it, take a window of it, or end it."""
    sock = params.get("runner_socket")
    if not sock:
        raise BenchFailure("live=%s needs runner_socket (a runner from runner_state=started)" % params["live"])
    renew = lease_ticker(params["run_id"]) if params["run_id"] else None
    try:
        if renew is not None:
            renew()
        if params["live"] == "stopped":
            return {"changed": False, "live": "stopped", "ended": live_stop(sock)}
        if params["live"] == "started":
            spec = {"env": params["env"]}
            if params["workload"] == "command":
                spec["command"] = params["command"]
            else:
                spec["args"] = json.loads(program_args(params, params["workload"]))
            answer, bad = live_start(sock, spec, params["timeout"], renew)
            result = {"changed": False, "live": "started", "reused": bool(answer.get("reused"))}
            result["live_start_s"] = answer.get("start_s") or 0.0
        else:
            window = dict(params.get("live_window") or {})
            seconds = float(window.get("seconds", 3.0))
            timeout = seconds + float(window.get("drop_s", 0.0)) + float(window.get("hang_s", 60.0)) + 60.0
            win, bad = live_window(sock, window, timeout, renew)
            result = {"changed": False, "live": "window", "window": win}
    except HostLocked as exc:
        raise BenchFailure("Failed to measure a window: %s" % exc, failure="lease_lost", lease_lost=True) from None
    except LeaseRenewalFailed as exc:
        raise BenchFailure("Failed to measure a window: %s" % exc, failure="lease_lost") from None
    except (OSError, ValueError, RunnerError) as exc:
        raise BenchFailure("Failed to reach the live session: %s" % exc, failure="start") from None
    if bad:
        raise BenchFailure(
            "The live %s failed: %s" % (params["workload"], bad.get("error") or bad.get("failure")),
            failure=bad.get("failure") or "error",
            error_line=str(bad.get("error") or "")[:500],
            stderr_tail=bad.get("stderr_tail") or "",
        )
    return result
