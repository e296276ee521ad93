"""Record windows of one running workload, switching a change on and off between them.

This is the live trial's measurement without the gate: the block runner (the bench module's
own code, ``PYTHONPATH=collections``) starts ONE live process of a built-in workload or of a
user's program, and windows of its steps are taken in a balanced order (A B B A quads, each
quad's order drawn at random), with ``--on``/``--off`` shell commands switching the change
between arms. The switch time is measured and never counted in a window: a window after a
switch starts ``--drop-s`` seconds and ``--drop-steps`` steps later; a window of the same arm
right after another continues it. It prints the spread of the window means and the ratio per
arm, and writes the windows as a fixture for the gate's replays.

    python3 benchmarks/live_windows.py --workload train_step --windows 10 --out /tmp/aa.json
    python3 benchmarks/live_windows.py --workload train_step --windows 8 \\
        --on 'nvidia-smi -pl 450' --off 'nvidia-smi -pl 700' --out /tmp/power.json
    python3 benchmarks/live_windows.py --command 'python3 my_train.py' --windows 8 --out /tmp/user.json
"""

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

from ansible_collections.stacktune.gpu.plugins.modules import bench  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads import runner_client  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.measure import measure  # noqa: E402


def switch(cmd):
    if not cmd:
        return 0.0
    t0 = time.monotonic()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)  # noqa: S602 - the operator's own command
    return time.monotonic() - t0


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="train_step")
    parser.add_argument("--command", help="a user's program that streams step lines (instead of --workload)")
    parser.add_argument("--python", default="/opt/torch/.venv/bin/python3")
    parser.add_argument("--size", type=int)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--windows", type=int, default=8, help="windows per arm")
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds per window")
    parser.add_argument("--drop-s", type=float, default=1.0)
    parser.add_argument("--drop-steps", type=int, default=2)
    parser.add_argument("--on", help="shell command that switches the change on")
    parser.add_argument("--off", help="shell command that switches the change off (runs first)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    python = args.python if os.path.exists(args.python) else sys.executable
    workload = "command" if args.command else args.workload
    params = bench.default_params(
        workload=workload if workload != "command" else "cpu_train_step",
        python=python,
        runner_state="started",
        runner_workloads=[] if args.command else [workload],
    )
    res = measure(params)
    sock = res["runner_socket"]
    spec = {"env": {}}
    if args.command:
        spec["command"] = shlex.split(args.command)
    else:
        cfg = {"workload": workload, "warmup": args.warmup, "device": 0, "workers": 4}
        if args.size:
            cfg["size"] = args.size
        spec["args"] = cfg
    rng = random.Random(args.seed)
    windows, switches = [], []
    try:
        switches.append({"to": "off", "seconds": round(switch(args.off), 3)})
        t0 = time.monotonic()
        answer, bad = runner_client.live_start(sock, spec, 600)
        if bad:
            raise SystemExit("live start failed: %s" % bad)
        started_s = time.monotonic() - t0
        on, order = False, []
        while len(order) < 2 * args.windows:
            order.extend(["on", "off", "off", "on"] if rng.random() < 0.5 else ["off", "on", "on", "off"])
        t_first = time.monotonic()
        for arm in order[: 2 * args.windows]:
            fresh = not windows
            if (arm == "on") != on:
                took = switch(args.on if arm == "on" else args.off)
                switches.append({"to": arm, "seconds": round(took, 3)})
                on, fresh = arm == "on", True
            win, bad = runner_client.live_window(
                sock,
                {"fresh": fresh, "seconds": args.seconds, "drop_s": args.drop_s, "drop_steps": args.drop_steps},
                args.seconds * 20 + 120,
            )
            if bad:
                raise SystemExit("window failed: %s" % bad)
            win["arm"] = arm
            win["samples_ms"] = [float("%.5g" % v) for v in win["samples_ms"]]
            windows.append(win)
            mean = statistics.fmean(win["samples_ms"])
            print(
                "window %2d %-3s %4d steps mean %.3f ms dropped %d"
                % (len(windows), arm, len(win["samples_ms"]), mean, win["dropped"]),
                flush=True,
            )
        total_s = time.monotonic() - t_first
        ended = runner_client.live_stop(sock)
    finally:
        switch(args.off)
        runner_client.stop_runner(sock)
    measured_s = sum(sum(w["samples_ms"]) for w in windows) / 1000.0
    summary = {"start_s": round(started_s, 2), "windows_s": round(total_s, 2), "measured_s": round(measured_s, 2)}
    summary["measured_share"] = round(measured_s / total_s, 3)
    for arm in ("off", "on"):
        means = [statistics.fmean(w["samples_ms"]) for w in windows if w["arm"] == arm]
        if len(means) > 1:
            summary[arm] = {
                "windows": len(means),
                "mean_ms": round(statistics.fmean(means), 4),
                "spread_pct": round(100.0 * statistics.stdev(means) / statistics.fmean(means), 3),
                "range_pct": round(100.0 * (max(means) - min(means)) / statistics.fmean(means), 3),
            }
    if "on" in summary and "off" in summary:
        summary["ratio_on_off"] = round(summary["on"]["mean_ms"] / summary["off"]["mean_ms"], 4)
    print(json.dumps(summary, indent=1))
    if args.out:
        doc = {
            "what": "live windows of one process (benchmarks/live_windows.py)",
            "host": platform.node(),
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "workload": workload,
            "command": args.command,
            "on": args.on,
            "off": args.off,
            "seconds": args.seconds,
            "drop_s": args.drop_s,
            "drop_steps": args.drop_steps,
            "summary": summary,
            "switches": switches,
            "windows": windows,
            "ended": {k: v for k, v in (ended or {}).items() if k != "final"},
        }
        with open(args.out, "w") as handle:
            json.dump(doc, handle)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
