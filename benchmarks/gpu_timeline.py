"""Record the timeline of one running program on a GPU host: every step, energy, raw samples.

One program runs for the whole recording (a user's command that prints step lines, or a
built-in workload of the bench module in live mode). While it runs this records, against one
monotonic clock:

- every step line as it arrives: ``steps`` = [[seconds since start, step ms], ...];
- NVML's total-energy counter and power draw of every GPU at ``--energy-hz``: ``energy`` =
  [[t, [mJ per GPU], [mW per GPU]], ...];
- raw samples at ``--sample-hz`` (0: none): per GPU the NVML readings a diagnosis reads
  (utilisation, power and its enforced limit, clocks, clock-event reasons, PCIe rx/tx, memory,
  temperature, energy) and the host's /proc text as read (stat, loadavg, vmstat, diskstats,
  net/dev, pressure) and the program's process tree (each process's stat and status text),
  so a sampler's arithmetic can be replayed on them exactly;
- arms: ``--arm NAME=COMMAND`` switches between windows in rounds, each round in an order drawn
  at random; the switch's start and end are recorded (``switches``), a window starts
  ``--settle-s`` after a switch and lasts ``--window-s``; ``@sampler-on`` / ``@sampler-off`` as
  a command turns the raw sampling on or off instead (an A/A of the sampler's cost).

``--finally`` runs at the end whatever happens (put back what the arms changed). The JSON goes
to ``--out``; a table per arm is printed last (median windows' mean step, spread, J/step, W).

    python3 benchmarks/gpu_timeline.py --command 'python3 tests/gpu/transformer_program.py' \\
        --warmup-s 15 --seconds 25 --sample-hz 2 --out /tmp/profile.json
    python3 benchmarks/gpu_timeline.py --command 'python3 tests/gpu/transformer_program.py' \\
        --arm 700='nvidia-smi -pl 700' --arm 450='nvidia-smi -pl 450' --rounds 3 \\
        --finally 'nvidia-smi -pl 700' --out /tmp/power.json
"""

import argparse
import json
import os
import platform
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import contextlib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(REPO, "collections"))

# The raw snapshot (host /proc text, the program's process tree, NVML readings) is the one
# diagnose takes, so a recording replays through diagnose's arithmetic as it is.
from ansible_collections.stacktune.gpu.plugins.module_utils.diagnose import snapshot  # noqa: E402


class Nvml(snapshot.Nvml):
    """diagnose's NVML readings, and the energy counter and power draw of every GPU."""

    def energy(self):
        return (
            [self.n.nvmlDeviceGetTotalEnergyConsumption(h) for h in self.handles],
            [self.n.nvmlDeviceGetPowerUsage(h) for h in self.handles],
        )


def builtin_command(python, workload, seconds):
    from ansible_collections.stacktune.gpu.plugins.module_utils.workloads.source import write_program  # noqa: PLC0415

    folder = tempfile.mkdtemp(prefix="stacktune-timeline-")
    path = write_program(folder)
    return [python, path, json.dumps({"workload": workload, "live": True, "warmup": 5, "max_s": seconds})]


class Recorder:
    def __init__(self, argv, nvml, sample_hz, energy_hz):
        self.t0 = time.monotonic()
        self.nvml = nvml
        self.steps, self.energy, self.samples = [], [], []
        self.sampling = sample_hz > 0
        self.sample_period = 1.0 / sample_hz if sample_hz > 0 else 0.5
        self.energy_period = 1.0 / energy_hz if energy_hz > 0 else 0
        self.done = threading.Event()
        self.proc = subprocess.Popen(  # noqa: S603 - the operator's own program
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, text=True
        )
        self.err = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._errors, daemon=True).start()
        if nvml is not None and self.energy_period:
            threading.Thread(target=self._energy, daemon=True).start()
        threading.Thread(target=self._sample, daemon=True).start()

    def now(self):
        return time.monotonic() - self.t0

    def _read(self):
        for line in self.proc.stdout:
            t = self.now()
            text = line.strip()
            try:
                value = float(json.loads(text)["step_ms"]) if text.startswith("{") else float(text)
            except (ValueError, KeyError, TypeError):
                continue
            self.steps.append([round(t, 6), round(value, 4)])

    def _errors(self):
        for line in self.proc.stderr:
            self.err.append(line)
            del self.err[:-40]

    def _energy(self):
        while not self.done.is_set():
            mj, mw = self.nvml.energy()
            self.energy.append([round(self.now(), 4), mj, mw])
            time.sleep(self.energy_period)

    def _sample(self):
        while not self.done.is_set():
            if self.sampling:
                self.samples.append(snapshot.take(self.proc.pid, self.now(), self.nvml))
            time.sleep(self.sample_period)

    def stop(self):
        self.done.set()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                with contextlib.suppress(OSError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def energy_at(energy, t):
    """Per-GPU mJ at ``t``, linear between the two readings around it."""
    before = [e for e in energy if e[0] <= t]
    after = [e for e in energy if e[0] >= t]
    if not before or not after:
        return None
    a, b = before[-1], after[0]
    if b[0] == a[0]:
        return a[1]
    w = (t - a[0]) / (b[0] - a[0])
    return [x + (y - x) * w for x, y in zip(a[1], b[1])]


def window(rec, arm, t0, t1):
    steps = [ms for t, ms in rec.steps if t0 < t <= t1 and t - ms / 1000.0 >= t0]
    doc = {"arm": arm, "t0": round(t0, 4), "t1": round(t1, 4), "steps_ms": steps}
    if steps and rec.energy:
        # the window's energy: from the first step's start to the last step's end
        arrivals = [t for t, ms in rec.steps if t0 < t <= t1 and t - ms / 1000.0 >= t0]
        start, end = arrivals[0] - steps[0] / 1000.0, arrivals[-1]
        e0, e1 = energy_at(rec.energy, start), energy_at(rec.energy, end)
        if e0 and e1:
            doc["energy_mj"] = [round(b - a, 1) for a, b in zip(e0, e1)]
            doc["span_s"] = round(end - start, 4)
    return doc


def summary(windows):
    rows = {}
    for w in windows:
        rows.setdefault(w["arm"], []).append(w)
    table = {}
    for arm, ws in rows.items():
        means = [statistics.fmean(w["steps_ms"]) for w in ws if w["steps_ms"]]
        steps = sorted(ms for w in ws for ms in w["steps_ms"])
        row = {
            "windows": len(means),
            "mean_ms": round(statistics.fmean(means), 3) if means else None,
            "cv_pct": round(100 * statistics.stdev(means) / statistics.fmean(means), 3) if len(means) > 1 else None,
            "p50_ms": round(steps[len(steps) // 2], 3) if steps else None,
            "p99_ms": round(steps[min(len(steps) - 1, int(0.99 * len(steps)))], 3) if steps else None,
        }
        jps = [sum(w["energy_mj"]) / 1000.0 / len(w["steps_ms"]) for w in ws if w.get("energy_mj") and w["steps_ms"]]
        watts = [sum(w["energy_mj"]) / w["span_s"] / 1000.0 for w in ws if w.get("energy_mj") and w.get("span_s")]
        if jps:
            row["j_per_step"] = round(statistics.fmean(jps), 3)
            row["j_cv_pct"] = round(100 * statistics.stdev(jps) / statistics.fmean(jps), 3) if len(jps) > 1 else None
            row["watts"] = round(statistics.fmean(watts), 1)
        table[arm] = row
    return table


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", help="a program that prints step lines")
    parser.add_argument("--workload", help="a built-in workload in live mode instead")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--warmup-s", type=float, default=15.0, help="seconds after the first step before recording")
    parser.add_argument("--seconds", type=float, default=20.0, help="profile: seconds recorded after the warm-up")
    parser.add_argument("--sample-hz", type=float, default=0.0)
    parser.add_argument("--energy-hz", type=float, default=20.0)
    parser.add_argument("--arm", action="append", default=[], help="NAME=COMMAND, switched between windows")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=3.0)
    parser.add_argument("--settle-s", type=float, default=1.0)
    parser.add_argument("--finally", dest="final", help="shell command run at the end whatever happens")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    arms = [a.split("=", 1) for a in args.arm]
    nvml = Nvml.open()
    if nvml is None:  # a host without NVML records no GPU readings
        print("no NVML: %s" % Nvml.why_not, file=sys.stderr)
    if args.command:
        argv_ = shlex.split(args.command)
    else:
        budget = args.warmup_s + args.seconds + len(arms) * args.rounds * (args.window_s + args.settle_s + 2) + 60
        argv_ = builtin_command(args.python, args.workload, budget)
    rec = Recorder(argv_, nvml, args.sample_hz, args.energy_hz)
    rec.sampling = False  # from the end of the warm-up (profile) or as an arm turns it on
    signal.signal(signal.SIGTERM, lambda *_args: (_x for _x in ()).throw(KeyboardInterrupt()))
    spans, switches = [], []
    rng = random.Random(args.seed)
    try:
        deadline = time.monotonic() + 120
        while not rec.steps and rec.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not rec.steps:
            raise SystemExit("no step line came: %s" % "".join(rec.err[-10:]))
        first = rec.now()
        time.sleep(args.warmup_s)
        if not arms:
            if args.sample_hz > 0:
                rec.sampling = True
            t0 = rec.now()
            time.sleep(args.seconds)
            spans.append(("all", t0, rec.now()))
        else:
            for rnd in range(args.rounds):
                order = list(arms)
                rng.shuffle(order)
                for name, cmd in order:
                    s0 = rec.now()
                    if cmd == "@sampler-on":
                        rec.sampling = True
                    elif cmd == "@sampler-off":
                        rec.sampling = False
                    else:
                        subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)  # noqa: S602
                    s1 = rec.now()
                    switches.append({"arm": name, "t0": round(s0, 4), "t1": round(s1, 4), "round": rnd})
                    time.sleep(args.settle_s)
                    t0 = rec.now()
                    time.sleep(args.window_s)
                    spans.append((name, t0, rec.now()))
                    if rec.proc.poll() is not None:
                        raise SystemExit("the program ended: %s" % "".join(rec.err[-10:]))
    finally:
        if args.final:
            subprocess.run(args.final, shell=True, check=False, stdout=subprocess.DEVNULL)  # noqa: S602
        rec.stop()
    # windows are cut once the recording ends, when the energy readings cover their last step
    windows = [window(rec, arm, t0, t1) for arm, t0, t1 in spans]
    table = summary(windows)
    doc = {
        "what": "timeline of one running program (benchmarks/gpu_timeline.py)",
        "label": args.label,
        "host": platform.node(),
        "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "program": args.command or "built-in %s (live)" % args.workload,
        **snapshot.host_meta(),  # ncpu, clk_tck, the NUMA nodes' cpulists
        "first_step_s": round(first, 4),
        "warmup_s": args.warmup_s,
        "steps": rec.steps,
        "energy": rec.energy,
        "samples": rec.samples,
        "switches": switches,
        "windows": windows,
        "summary": table,
        "stderr_tail": "".join(rec.err[-10:]),
    }
    with open(args.out, "w") as handle:
        json.dump(doc, handle)
    print(
        "%s: %d steps, %d samples, first step at %.1f s"
        % (args.label or args.out, len(rec.steps), len(rec.samples), first)
    )
    for arm, row in table.items():
        print("  %-12s %s" % (arm, json.dumps(row)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
