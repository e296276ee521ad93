# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The block runner's client side: requests over its unix socket, live sessions among them.

The runner (``workloads/program.py``) serves one request at a time on a private socket. A
request is one JSON line and its answer one JSON line. A long request (a block, a live
window, a live start) is waited on with the run's lease checked every ``tick_s``: when the
run no longer holds the host the connection is closed, and the runner gives the request up
(it kills a block; a live window is abandoned, and the runner itself ends on the lost lease).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import select
import socket
import time


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
