"""Cores driver: tune, the gate and rollback on every other supported ansible-core.

Run by the molecule scenario ``cores`` (``make cores``, part of ``make test``), or by hand once
the scenario's container exists (``molecule create -s cores && molecule prepare -s cores``):
    python3 tests/integration/cores.py VENV [VENV ...]
where each VENV holds one ansible bundle (``tools/bootstrap.sh cores`` makes them from
requirements-cores.txt; STACKTUNE_CORES names them when no argument does).

The molecule container is tuned once per ansible-core, one after the other, with that core's
``ansible-playbook``, as a fresh host each time (the previous core's journal removed after its
rollback):
1. ``tune.yml`` with the gate on two layers, as the gate scenario has them: a sysctl that the
   unprivileged container can only persist (kept unmeasured) and the test-only tail_stall
   layer, which makes the test workload stall (rolled back by the gate on the tail, in blocks);
2. the journal and the report say so, and the report has the same shape (every key, and every
   value's type: no '' where another core writes null, no "400" where another writes 400) on
   every core; within the gate's details, which depend on what was measured (a verdict of
   "worse" carries worse_by), only those two faults count;
3. ``rollback.yml`` puts the container back to its state before the tune (a hash of every
   file the layers manage).
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

from safety import HASH_SCRIPT

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCENARIO = os.path.join(REPO, "extensions", "molecule", "cores")
HOST = os.environ.get("STACKTUNE_CORES_HOST", "cores-a")
TAIL_STALL = os.path.join(REPO, "extensions", "molecule", "gate", "roles", "tail_stall")
# step times printed, not timed (the step program's --printed): the verdict depends on the stall
# alone, so this scenario runs beside other tests in make test; the gate scenario times real work
STEP = ["python3", "/usr/local/bin/stacktune-test-step", "--steps", "520", "--printed"]
# What the layers manage on the container, hashed before the tune and after the rollback:
# the safety driver's hash of every managed file and live value, and the stall's switch.
STATE = HASH_SCRIPT.replace(
    "/etc/security/limits.d/60-stacktune-memlock.conf;",
    "/etc/security/limits.d/60-stacktune-memlock.conf /etc/stacktune-test/stall.conf;",
)
assert STATE != HASH_SCRIPT, "the safety driver's hash no longer lists the memlock file"
VARS = {
    "ansible_connection": "podman",
    "ansible_python_interpreter": "/usr/bin/python3",
    # every layer that has settings on an unprivileged GPU-less container, each only persisted
    # there (kept unmeasured: no block can see it), but nccl (/etc/nccl.conf, which a block does
    # see: measured with no effect, it is kept or rolled back by chance), and the stall
    "stacktune_layers": ["bios", "driver", "memory", "kernel", "numa_irq", "gpu_settings", TAIL_STALL],
    "stacktune_gate_policies": {"kernel": "no_regression", "tail_stall": "improve"},
    "kernel_sysctl": {"vm.overcommit_memory": "1"},
    "kernel_cmdline_args": {"pcie_aspm": "off"},
    "stacktune_bench_workload": "command",
    "stacktune_bench_command": STEP,
    "stacktune_bench_warmup": 50,
    "stacktune_gate_budget": {"min_blocks": 4, "max_blocks": 8, "max_seconds": 300},
}


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def podman(*args, **kwargs):
    return subprocess.run(["podman"] + list(args), check=False, capture_output=True, text=True, **kwargs)


def sh(script):
    run = podman("exec", HOST, "sh", "-c", script)
    check(run.returncode == 0, "%s: %s failed: %s" % (HOST, script, run.stderr))
    return run.stdout


def core_of(venv):
    """The ansible-core version of a venv's ansible-playbook, as 2.16.19."""
    out = subprocess.run(
        [os.path.join(venv, "bin", "ansible-playbook"), "--version"], check=True, capture_output=True, text=True
    ).stdout
    found = re.search(r"core ([0-9]+\.[0-9]+\.[0-9]+)", out)
    check(found, "%s: no ansible-core version in %r" % (venv, out))
    return found.group(1)


def shape(value, path="", out=None):
    """Every key path of a JSON document with the types found there: {path: {type, ...}}."""
    out = {} if out is None else out
    if isinstance(value, dict):
        out.setdefault(path, set()).add("dict")
        for key, item in value.items():
            # host names, layer names and run ids are keys in some places: their values count
            shape(item, "%s.%s" % (path, key), out)
    elif isinstance(value, list):
        out.setdefault(path, set()).add("list")
        for item in value:
            shape(item, path + "[]", out)
    else:
        if value is None:
            kind = "null"
        elif isinstance(value, bool):
            kind = "bool"
        elif isinstance(value, (int, float)):
            kind = "number"
        elif value == "":
            kind = "empty string"
        else:
            kind = "string"
        out.setdefault(path, set()).add(kind)
    return out


# The gate's details under a layer depend on what was measured, not on the core: a verdict of
# "worse" carries worse_by, an interval may be null when nothing was resolved. There only the
# faults of a template rendered before ansible-core 2.19 count: '' where another core writes
# something else, or a string where another writes a number or a boolean.
MEASURED = ".layers[].gate"


def _template_fault(mine, theirs):
    differ = mine ^ theirs
    if "empty string" in differ:
        return True
    return "string" in differ and bool({"number", "bool"} & (mine | theirs))


def shape_differences(reference, other):
    """The paths whose types differ between two shapes, as readable lines."""
    lines = []
    for path in sorted(set(reference) | set(other)):
        mine, theirs = reference.get(path, {"absent"}), other.get(path, {"absent"})
        if mine == theirs:
            continue
        measured = path == MEASURED or path.startswith(MEASURED + ".")
        if measured and ("absent" in mine or "absent" in theirs or not _template_fault(mine, theirs)):
            continue
        lines.append("%s: %s vs %s" % (path or "(top)", "/".join(sorted(mine)), "/".join(sorted(theirs))))
    return lines


def environment(home):
    """The core's ansible-playbook sees only this working tree's configuration and collection."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_", "PYTHON"))}
    env.update(
        {
            "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, "collections"),
            "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles"),
            "ANSIBLE_CONNECTION_PLUGINS": os.path.join(REPO, "tests", "molecule", "plugins", "connection"),
            "ANSIBLE_HOME": home,
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    return env


def playbook(venv, work, name, playbook_path, inventory, extra):
    log = os.path.join(work, name + ".log")
    argv = [os.path.join(venv, "bin", "ansible-playbook"), "-i", inventory, os.path.join(REPO, playbook_path)]
    argv += ["-e", json.dumps(extra)]
    started = time.time()
    with open(log, "w") as handle:
        run = subprocess.run(
            argv,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=environment(os.path.join(work, "ansible-home")),
            cwd=work,
            timeout=1800,
            check=False,
        )
    with open(log) as handle:
        text = handle.read()
    check(run.returncode == 0, "%s exited %d; the end of its log:\n%s" % (name, run.returncode, text[-4000:]))
    return time.time() - started, text


def journal(layer):
    return json.loads(sh("cat /var/lib/stacktune/layers/%s.json" % layer))


def one_core(venv, work):
    core = core_of(venv)
    tag = "core-" + core
    reports = os.path.join(work, "reports-" + core)
    inventory = os.path.join(work, "inventory.json")
    with open(inventory, "w") as handle:
        json.dump({"all": {"hosts": {HOST: {}}, "vars": VARS}}, handle)
    before = sh(STATE)

    tune_s, text = playbook(
        venv, work, tag + "-tune", "tune.yml", inventory, {"stacktune_report_dir": reports, "stacktune_run_id": tag}
    )
    check("does not support Ansible version" not in text, "%s: meta/runtime.yml refuses ansible-core %s" % (tag, core))
    stall, kernel = journal("tail_stall"), journal("kernel")
    decision = stall.get("decision") or {}
    check(
        stall.get("state") == "rolled_back"
        and decision.get("decision") == "rollback"
        and decision.get("method") == "blocks",
        "%s: the gate did not roll the stall back in blocks: %s" % (tag, json.dumps(decision)[:2000]),
    )
    check(
        "worse" in ((decision.get("tail") or {}).get("verdict"), (decision.get("stalls") or {}).get("verdict")),
        "%s: the rollback is not on the tail or the stalls: %s" % (tag, json.dumps(decision)[:2000]),
    )
    check(
        (decision.get("blocks") or {}).get("with", 0) >= 4 and (decision.get("blocks") or {}).get("without", 0) >= 4,
        "%s: fewer than 4 blocks per arm: %s" % (tag, decision.get("blocks")),
    )
    check(
        kernel.get("state") == "kept" and (kernel.get("decision") or {}).get("measurable") is False,
        "%s: the persisted-only kernel layer was not kept unmeasured: %s" % (tag, json.dumps(kernel)[:2000]),
    )
    held = sorted(sh("ls /var/lib/stacktune/layers").split())
    check("memory.json" in held, "%s: no journal of the memory layer: %s" % (tag, held))
    for name in held:
        if name.endswith(".json") and name not in ("tail_stall.json",):
            entry = journal(name[: -len(".json")])
            # a layer with no setting on this host (gpu_settings and numa_irq without a GPU) is
            # journaled as restored with nothing held; every other one is kept
            held_nothing = entry.get("state") == "restored" and not entry.get("settings")
            check(
                entry.get("state") == "kept" or held_nothing,
                "%s: layer %s is %s, not kept: %s" % (tag, name, entry.get("state"), json.dumps(entry)[:1000]),
            )
    check("vm.overcommit_memory = 1" in sh("cat /etc/sysctl.d/60-stacktune-kernel.conf"), "%s: sysctl not kept" % tag)
    check("absent" in sh("ls /etc/stacktune-test/stall.conf 2>/dev/null || echo absent"), "%s: stall left" % tag)
    with open(os.path.join(reports, tag, HOST + ".json")) as handle:
        report = json.load(handle)

    rollback_s, _text = playbook(
        venv, work, tag + "-rollback", "playbooks/rollback.yml", inventory, {"stacktune_run_id": tag + "-rollback"}
    )
    after = sh(STATE)
    check(
        after == before,
        "%s: rollback.yml did not restore the state before the tune:\n%s\nvs\n%s" % (tag, before, after),
    )
    # the next core tunes a fresh host
    sh("rm -rf /var/lib/stacktune")
    print(
        "ansible-core %s: tune %.0f s (stall rolled back by the gate on %s+%s blocks, sysctl kept unmeasured), "
        "rollback %.0f s (state restored)"
        % (core, tune_s, decision["blocks"]["with"], decision["blocks"]["without"], rollback_s),
        flush=True,
    )
    return core, shape(report)


def main(argv):
    venvs = argv or os.environ.get("STACKTUNE_CORES", "").split()
    check(venvs, "no venv given: name them as arguments or in STACKTUNE_CORES (tools/bootstrap.sh cores makes them)")
    for venv in venvs:
        check(os.access(os.path.join(venv, "bin", "ansible-playbook"), os.X_OK), "%s has no ansible-playbook" % venv)
    work = tempfile.mkdtemp(prefix="stacktune-cores-")
    shapes = {}
    for venv in venvs:
        core, report_shape = one_core(os.path.abspath(venv), work)
        shapes[core] = report_shape
    newest = max(shapes, key=lambda c: tuple(int(p) for p in c.split(".")))
    problems = []
    for core, report_shape in sorted(shapes.items()):
        for line in shape_differences(shapes[newest], report_shape):
            problems.append("ansible-core %s vs %s: %s" % (newest, core, line))
    check(not problems, "the tune reports differ in shape:\n" + "\n".join(problems))
    print(
        "cores: %d ansible-core versions tuned, gated and rolled back; their reports have one shape (%s)"
        % (len(shapes), ", ".join(sorted(shapes))),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except Failure as exc:
        print("FAILED: %s" % exc, flush=True)
        sys.exit(1)
