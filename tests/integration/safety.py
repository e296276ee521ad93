"""Safety driver: proves on real containers that stacktune never loses a setting.

Run by the molecule scenario ``safety`` (part of ``make test``), or by hand once the
scenario's containers exist (``molecule create -s safety && molecule prepare -s safety``):
    python3 tests/integration/safety.py [--keep]

Phases (each one asserts and prints what it covered):
1. bad input: every case of the corpus (tune.yml, drift.yml, rollback.yml, verify.yml,
   acceptance.yml variables, and every list and mapping variable of the roles called
   directly with include_role) fails before any host change, with a message naming its
   variable; the host's state hash is unchanged and no journal or metrics file appears.
2. check-mode fidelity: ``tune.yml --check`` then the real run on the reference host;
   per layer and setting, the predicted changes equal the real ones.
3. crash safety: the same run on hosts killed (SIGKILL) at named points inside the
   engine (the STACKTUNE_TEST_KILL_AT test hook) and while a layer is being measured;
   a re-run ends in the reference host's state (hash of every managed file and live value).
4. concurrency: a second run against a host while a first one holds it is refused with
   a message naming the first; a direct engine write of another run id is refused too.
5. rollback: after someone else edits managed files, ``rollback.yml`` returns every host
   to its exact pre-tune hash (files that did not exist are gone, fstab lines and boot
   arguments removed, live values back).
6. hygiene: modes and owners of managed files and of the journal, no temporary files,
   no secret (a CIFS password planted in /etc/fstab) in any log, journal or report.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONNECTION_PLUGINS = os.path.join(REPO, "tests", "molecule", "plugins", "connection")
SECRET = "S3cretSmbPassw0rd"  # planted in /etc/fstab by prepare; must never be logged
LINKED_SECRET = "root:$6$L1nkedShad0wHash:19000:0:99999:7:::"  # behind a link planted by the hostile phase
LAYERS = ["bios", "driver", "memory", "kernel", "numa_irq", "gpu_settings", "nccl"]
# The layers that have settings on a GPU-less container: the killed hosts tune only these
# (the others change nothing there), so they must still end in the reference host's state.
KILLED_LAYERS = ["memory", "kernel", "nccl"]
KILLS = {
    "safety-k1": "after_journal_write_ahead@memory",
    "safety-k2": "mid_unit_write@kernel",
    "safety-k3": "after_units_written@kernel",
    "safety-k4": "after_live_written@nccl",
    "safety-k5": "before_journal_final@memory",
}
MEASURE_KILL = "safety-m"  # SIGKILLed while the nccl layer is being measured
REF = "safety-ref"
ALL = [REF, MEASURE_KILL] + sorted(KILLS)
# The controller stopped while the gate measures the nccl layer (on these unprivileged
# containers the only one of KILLED_LAYERS whose change a block can see: /etc/nccl.conf is read
# by every new process, the kernel layer's sysctls and the memory layer's /dev/shm size can only
# be persisted, memlock limits apply at the next login): by SIGINT (Ctrl-C, an
# AWX cancel) and SIGTERM (timeout, a scheduler) during a block with the layer, a block
# without it and the switch between them; by SIGKILL of its whole process group during a
# block with and without it. Each host takes its cases one after the other.
SIGNAL_CASES = {
    "safety-s1": [("SIGINT", "with", False), ("SIGTERM", "with", False)],
    "safety-s2": [("SIGINT", "without", False), ("SIGTERM", "without", False)],
    "safety-s3": [("SIGINT", "switch", False), ("SIGTERM", "switch", False)],
    "safety-s4": [("SIGKILL", "with", True), ("SIGKILL", "without", True)],
}
# Each block marks which arm it runs in, and lasts long enough to be interrupted.
# A block says which side it measures (a marker file), and the block of the side the driver named
# in HOLD stays until the driver's signal ends the run (at most 2 minutes): the signal always
# arrives during that block, however long the driver's own look at the host takes under load.
HOLD = "/run/stacktune-test-hold"
MARKED = (
    "if [ -e /etc/nccl.conf ]; then b=with; else b=without; fi; touch /run/stacktune-block-$b; "
    'if [ "$(cat %s 2>/dev/null)" = "$b" ]; then for i in $(seq 600); do sleep 0.2; done; else sleep 3; fi; ' % HOLD
)
MARKERS = {
    "with": "/run/stacktune-block-with",
    "without": "/run/stacktune-block-without",
    "switch": "/run/stacktune-test-paused",  # the engine's pause point mid_suspend (test hook)
}
# A messy or hostile host, each case one tune (or rollback) on a container of its own:
# (name, shell that plants the fault, run's variables, playbook, what the refusal must say
# or None when the run must succeed, shell that takes the fault away again).
SAVE_FSTAB = "cp -p /etc/fstab /root/fstab.saved; "
PUT_BACK_FSTAB = "rm -f /etc/fstab; mv /root/fstab.saved /etc/fstab"
HOSTILE = {
    "safety-h1": [
        (
            "a managed file that is a link to a secret",
            "printf '%s\\n' '" + LINKED_SECRET + "' > /root/shadow-copy; chmod 600 /root/shadow-copy; "
            "ln -s /root/shadow-copy /etc/nccl.conf",
            {"stacktune_layers": ["nccl"]},
            "playbooks/tune.yml",
            "/etc/nccl.conf is a symbolic link (to /root/shadow-copy)",
            "rm -f /etc/nccl.conf /root/shadow-copy",
        ),
        (
            "/etc/fstab a link to another file",
            SAVE_FSTAB + "cp -p /etc/fstab /root/fstab.real; rm /etc/fstab; ln -s /root/fstab.real /etc/fstab",
            {"stacktune_layers": ["memory"]},
            "playbooks/tune.yml",
            "/etc/fstab is a symbolic link (to /root/fstab.real)",
            "rm -f /root/fstab.real; " + PUT_BACK_FSTAB,
        ),
        (
            "/etc/fstab with two /dev/shm lines",
            SAVE_FSTAB
            + "printf 'tmpfs /dev/shm tmpfs size=1G 0 0\\ntmpfs /dev/shm tmpfs size=2G 0 0\\n' >> /etc/fstab",
            {"stacktune_layers": ["memory"]},
            "playbooks/tune.yml",
            "/etc/fstab has 2 lines for /dev/shm",
            PUT_BACK_FSTAB,
        ),
    ],
    "safety-h2": [
        (
            "a shared directory (1777) as the journal",
            "chmod 1777 /tmp",
            {"stacktune_layers": ["nccl"], "stacktune_journal_dir": "/tmp"},
            "playbooks/tune.yml",
            "a shared directory such as /tmp is no place for it",
            "true",
        ),
        (
            "a world-writable journal holding a record another user owns",
            "chmod 0777 /var/lib/stacktune/layers; chown nobody /var/lib/stacktune/layers/nccl.json",
            {"stacktune_layers": ["nccl"]},
            "playbooks/rollback.yml",
            "is writable by its group or by others (mode 0777)",
            "chmod 0700 /var/lib/stacktune/layers; chown root /var/lib/stacktune/layers/nccl.json",
        ),
        (
            "a journal record holding {}",
            "cp -p /var/lib/stacktune/layers/nccl.json /root/nccl.json.saved; "
            "echo '{}' > /var/lib/stacktune/layers/nccl.json",
            {"stacktune_layers": ["nccl"]},
            "playbooks/tune.yml",
            "is not a stacktune layer record (it holds an empty object)",
            "mv /root/nccl.json.saved /var/lib/stacktune/layers/nccl.json",
        ),
        (
            "an /etc/fstab without a final newline, tuned and rolled back",
            SAVE_FSTAB + "printf 'UUID=abcd / ext4 defaults 0 1' > /etc/fstab",
            {"stacktune_layers": ["memory"]},
            "playbooks/tune.yml",
            None,
            PUT_BACK_FSTAB,
        ),
    ],
}

# The podman and runc that the safety driver puts first on PATH for a run with test hooks: a call
# that enters a container gets the container's hooks (hook_env's table) as --env arguments.
HOOK_WRAPPER = """#!/bin/sh
# %(call)s ...: add the container's test hooks to the module's environment
if %(test)s; then
  container=%(container)s
  envs=$(sed -n "s/^$container //p" "$STACKTUNE_SAFETY_HOOKS" | sed "s/^/--env /")
  if [ -n "$envs" ]; then %(again)s; fi
fi
exec "$STACKTUNE_REAL_%(real)s" "$@"
"""
HOOK_CALLS = {
    "podman": {
        "call": "podman exec [-i] <container>",
        "test": '[ "$1" = exec ]',
        "container": '$2; [ "$container" = -i ] && container=$3',
        "again": 'shift; exec "$STACKTUNE_REAL_PODMAN" exec $envs "$@"',
        "real": "PODMAN",
    },
    "runc": {
        "call": "runc --root <dir> exec <id>",
        "test": '[ "$1" = --root ] && [ "$3" = exec ]',
        "container": "$4",
        "again": 'root=$2; shift 4; exec "$STACKTUNE_REAL_RUNC" --root "$root" exec $envs "$container" "$@"',
        "real": "RUNC",
    },
}

# Every process of a container but its init and the shell that looks.
OTHER_PROCESSES = r"""
for d in /proc/[0-9]*; do
  p=${d#/proc/}; [ "$p" = 1 ] || [ "$p" = $$ ] && continue
  c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
  case "$c" in ""|tr\ *) continue;; esac
  echo "$p $c"
done
"""

# A deterministic workload and "no_regression" for every layer: the gate keeps every layer,
# so a gated run ends in the same state as an ungated one and runs compare setting by setting.
STEADY = "for i in $(seq 40); do echo 1.0; done"
KILL_WHILE_MEASURING = (
    "if [ -e /etc/nccl.conf ] && [ ! -e /root/measure-killed ]; then "
    "touch /root/measure-killed; kill -KILL $PPID; sleep 5; fi; " + STEADY
)
GATED = {
    "stacktune_gate": True,
    "stacktune_gate_default_policy": "no_regression",
    "stacktune_gate_policies": dict.fromkeys(LAYERS, "no_regression"),
    # the gate's judgement is tested elsewhere (gate scenario, unit tests): here it only has
    # to measure, so the smallest budget the gate accepts keeps the kill and lock tests short
    "stacktune_gate_budget": {"min_blocks": 2, "max_blocks": 2, "max_seconds": 300},
}

# playbook, case name, extra vars, the variable the message must name
TUNE = "playbooks/tune.yml"
BAD_INPUTS = [
    (TUNE, "layers-unknown", {"stacktune_layers": ["memory", "no_such_layer"]}, "stacktune_layers"),
    (TUNE, "layers-type", {"stacktune_layers": {"memory": 1}}, "stacktune_layers"),
    (TUNE, "layers-string", {"stacktune_layers": "[kernal]"}, "stacktune_layers"),
    (TUNE, "layers-path", {"stacktune_layers": ["../../etc/cron.d"]}, "stacktune_layers"),
    (TUNE, "gate-type", {"stacktune_gate": "perhaps"}, "stacktune_gate"),
    (TUNE, "policy-choice", {"stacktune_gate_default_policy": "sometimes"}, "stacktune_gate_default_policy"),
    (TUNE, "policies-value", {"stacktune_gate_policies": {"kernel": "always"}}, "stacktune_gate_policies"),
    (TUNE, "quantile-range", {"stacktune_gate_tail_quantile": 1.5}, "stacktune_gate_tail_quantile"),
    (TUNE, "tolerance-negative", {"stacktune_gate_tail_tolerance": -0.1}, "stacktune_gate_tail_tolerance"),
    (TUNE, "confidence-range", {"stacktune_gate_confidence": 2}, "stacktune_gate_confidence"),
    (TUNE, "tolerance-range", {"stacktune_gate_tail_tolerance": 1.5}, "stacktune_gate_tail_tolerance"),
    (TUNE, "budget-range", {"stacktune_gate_budget": {"max_blocks": 0}}, "stacktune_gate_budget"),
    (TUNE, "budget-key", {"stacktune_gate_budget": {"rounds": 2}}, "stacktune_gate_budget"),
    (TUNE, "workloads-name", {"stacktune_gate_workloads": {"nccl": ["allreduc"]}}, "stacktune_gate_workloads"),
    (TUNE, "steps-type", {"stacktune_bench_steps": "many"}, "stacktune_bench_steps"),
    (TUNE, "steps-zero", {"stacktune_bench_steps": 0}, "stacktune_bench_steps"),
    (TUNE, "workload-choice", {"stacktune_bench_workload": "bitcoin"}, "stacktune_bench_workload"),
    (
        TUNE,
        "command-empty",
        {"stacktune_bench_workload": "command", "stacktune_bench_command": []},
        "stacktune_bench_command",
    ),
    (TUNE, "journal-relative", {"stacktune_journal_dir": "var/lib/x"}, "stacktune_journal_dir"),
    (TUNE, "journal-dotdot", {"stacktune_journal_dir": "/var/lib/../../etc"}, "stacktune_journal_dir"),
    (TUNE, "sysctl-missing", {"kernel_sysctl": {"vm.no_such_knob": "1"}}, "kernel_sysctl"),
    (TUNE, "sysctl-name", {"kernel_sysctl": {"vm swappiness": "1"}}, "kernel_sysctl"),
    (TUNE, "sysctl-newline", {"kernel_sysctl": {"vm.swappiness": "1\nkernel.panic = 1"}}, "kernel_sysctl"),
    (TUNE, "sysctl-type", {"kernel_sysctl": ["vm.swappiness=1"]}, "kernel_sysctl"),
    (TUNE, "profile-choice", {"kernel_profile": "fastest"}, "kernel_profile"),
    (TUNE, "cmdline-inject", {"kernel_cmdline_args": {"pcie_aspm": "off; reboot"}}, "kernel_cmdline_args"),
    (TUNE, "aspm-choice", {"kernel_aspm_policy": "turbo"}, "kernel_aspm_policy"),
    (TUNE, "shm-size", {"memory_shm_size": "-8G"}, "memory_shm_size"),
    (TUNE, "shm-unit", {"memory_shm_size": "64X"}, "memory_shm_size"),
    (TUNE, "shm-no-unit", {"memory_shm_size": 64}, "memory_shm_size"),
    (TUNE, "typo-layers", {"stacktune_layer": ["kernel"]}, "stacktune_layer"),
    (TUNE, "typo-sysctl", {"kernel_sysctls": {"vm.swappiness": "10"}}, "kernel_sysctls"),
    ("playbooks/rollback.yml", "typo-rollback", {"stacktune_rollback_layer": ["kernel"]}, "stacktune_rollback_layer"),
    (TUNE, "sysctl-yaml-bool", {"kernel_sysctl": {"vm.swappiness": False}}, "kernel_sysctl"),
    (TUNE, "sysctl-null", {"kernel_sysctl": {"vm.swappiness": None}}, "kernel_sysctl"),
    (TUNE, "sysctl-range", {"kernel_sysctl": {"vm.swappiness": "300"}}, "kernel_sysctl"),
    (TUNE, "cmdline-yaml-bool", {"kernel_cmdline_args": {"pcie_aspm": False}}, "kernel_cmdline_args"),
    (TUNE, "nccl-path-passwd", {"nccl_conf_path": "/etc/passwd"}, "nccl_conf_path"),
    (TUNE, "nccl-path-slash", {"nccl_conf_path": "/etc/nccl.conf/"}, "nccl_conf_path"),
    (TUNE, "lock-wait-negative", {"stacktune_lock_wait": -1}, "stacktune_lock_wait"),
    (TUNE, "lock-ttl-short", {"stacktune_lock_ttl": 5}, "stacktune_lock_ttl"),
    (
        TUNE,
        "bench-python-missing",
        {"stacktune_gate": True, "stacktune_bench_workload": "auto", "stacktune_bench_python": "/nonexistent/python3"},
        "stacktune_bench_python",
    ),
    (TUNE, "memlock", {"memory_memlock": "lots"}, "memory_memlock"),
    (TUNE, "hugepages-negative", {"memory_hugepages": -1}, "memory_hugepages"),
    (TUNE, "thp-choice", {"memory_thp_enabled": "sometimes"}, "memory_thp_enabled"),
    (TUNE, "irq-cpulist-backwards", {"numa_irq_cpus_override": {"0000:3b:00.0": "7-3"}}, "numa_irq_cpus_override"),
    (TUNE, "irq-cpulist-garbage", {"numa_irq_cpus_override": {"0000:3b:00.0": "a,b"}}, "numa_irq_cpus_override"),
    (TUNE, "irq-pci-address", {"numa_irq_cpus_override": {"3b:00.0": "0-3"}}, "numa_irq_cpus_override"),
    (TUNE, "irqbalance-path", {"numa_irq_irqbalance_config": "/etc/../root/.bashrc"}, "numa_irq_irqbalance_config"),
    (TUNE, "nccl-path-unsafe", {"nccl_conf_path": "/root/.ssh/authorized_keys"}, "nccl_conf_path"),
    (TUNE, "nccl-path-dotdot", {"nccl_conf_path": "/etc/../root/x"}, "nccl_conf_path"),
    (TUNE, "nccl-env-name", {"nccl_env": {"LD_PRELOAD": "/tmp/x.so"}}, "nccl_env"),
    (TUNE, "nccl-env-newline", {"nccl_env": {"NCCL_SOCKET_NTHREADS": "4\nLD_PRELOAD=x"}}, "nccl_env"),
    (TUNE, "power-negative", {"gpu_settings_power_limit_watts": -300}, "gpu_settings_power_limit_watts"),
    (TUNE, "clocks-format", {"gpu_settings_app_clocks": "fast"}, "gpu_settings_app_clocks"),
    (TUNE, "compute-mode", {"gpu_settings_compute_mode": "shared"}, "gpu_settings_compute_mode"),
    (TUNE, "gpus-type", {"gpu_settings_gpus": "first"}, "gpu_settings_gpus"),
    (TUNE, "driver-version", {"driver_nvidia_version": "latest; rm -rf /"}, "driver_nvidia_version"),
    (TUNE, "bios-fail-on", {"bios_fail_on": "everything"}, "bios_fail_on"),
    (TUNE, "psu-negative", {"preflight_psu_capacity_watts": -1}, "preflight_psu_capacity_watts"),
    (TUNE, "preflight-fail-on", {"preflight_fail_on": "panic"}, "preflight_fail_on"),
    (TUNE, "metrics-dir", {"stacktune_metrics_dir": "../textfile"}, "stacktune_metrics_dir"),
    (TUNE, "metrics-path-removed", {"metrics_textfile_path": "/var/lib/x/stacktune.prom"}, "stacktune_metrics_dir"),
    ("playbooks/drift.yml", "drift-fix-type", {"stacktune_drift_fix": "perhaps"}, "stacktune_drift_fix"),
    ("playbooks/drift.yml", "drift-journal", {"stacktune_journal_dir": "relative/dir"}, "stacktune_journal_dir"),
    (
        "playbooks/rollback.yml",
        "rollback-layers",
        {"stacktune_rollback_layers": ["../../etc/passwd"]},
        "stacktune_rollback_layers",
    ),
    ("playbooks/rollback.yml", "rollback-journal", {"stacktune_journal_dir": "/etc/../tmp"}, "stacktune_journal_dir"),
    ("playbooks/verify.yml", "verify-journal", {"stacktune_journal_dir": "journal"}, "stacktune_journal_dir"),
    ("playbooks/acceptance.yml", "acceptance-level", {"acceptance_level": "ultra"}, "acceptance_level"),
    ("playbooks/acceptance.yml", "acceptance-rounds", {"acceptance_rounds": 0}, "acceptance_rounds"),
    (
        "playbooks/acceptance.yml",
        "acceptance-pcie-order",
        {"acceptance_pcie_reject_below": 0.9},
        "acceptance_pcie_reject_below",
    ),
    (
        "playbooks/acceptance.yml",
        "acceptance-fraction",
        {"acceptance_memory_warn_below": 1.5},
        "acceptance_memory_warn_below",
    ),
]

# Roles called directly (include_role): every list and mapping variable of every role, given
# a value of the wrong type, must be refused naming it. Generated from the argument specs.
DIRECT = "tests/integration/direct-roles.yml"
DIRECT_ROLES = (
    "acceptance",
    "bios",
    "driver",
    "facts",
    "gpu_settings",
    "kernel",
    "memory",
    "metrics",
    "nccl",
    "numa_irq",
    "preflight",
    "stacktune",
)
WRONG_TYPE = {"list": 7, "dict": ["not", "a", "mapping"]}


def direct_role_cases():
    import yaml

    cases = []
    for role in DIRECT_ROLES:
        with open(os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")) as handle:
            options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
        for name, spec in sorted(options.items()):
            if spec.get("type") in WRONG_TYPE:
                bad = {"safety_role": role, name: WRONG_TYPE[spec["type"]]}
                cases.append((DIRECT, "role-%s" % name.replace("_", "-"), bad, name))
    return cases


BAD_INPUTS += direct_role_cases()

# Every variable whose text lands in a line of a file (a file a shell sources, or one a program
# reads line by line) gets the values that would escape that line: a command substitution, and
# U+2028, a line break to Python's str.splitlines but to no [\n\r] check. Generated from the
# argument specs and the rules of plugins/module_utils/policy/varspec.py; layer roles that
# tune.yml does not run by default are named in the case's stacktune_layers.
ESCAPES = {"subst": "$(touch /tmp/stacktune-escaped) --x", "u2028": "1\u2028kernel.panic = 1"}
TUNE_ROLES = ("stacktune", "preflight", "metrics")


def escape_cases():
    import yaml

    sys.path.insert(0, os.path.join(REPO, "collections"))
    from ansible_collections.stacktune.gpu.plugins.module_utils.policy.varspec import rule_for

    cases = []
    for role in sorted(os.listdir(os.path.join(REPO, "roles"))):
        path = os.path.join(REPO, "roles", role, "meta", "argument_specs.yml")
        if not os.path.isfile(path) or not (
            role in TUNE_ROLES or os.path.exists(os.path.join(REPO, "roles", role, "tasks", "plan.yml"))
        ):
            continue
        with open(path) as handle:
            options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
        for name, spec in sorted(options.items()):
            if not rule_for(name).get("line"):
                continue
            for label, bad in sorted(ESCAPES.items()):
                kind = (spec or {}).get("type", "str")
                value = {"x": bad} if kind == "dict" else [bad] if kind == "list" else bad
                extra = {name: value}
                if role not in TUNE_ROLES and role not in LAYERS and name != "stacktune_layers":
                    extra["stacktune_layers"] = [role]
                cases.append((TUNE, "line-%s-%s" % (name.replace("_", "-"), label), extra, name))
    return cases


BAD_INPUTS += escape_cases()
# A run id that would put the reports outside stacktune_report_dir (given with -e, as a run id
# is): refused before the host is touched, and nothing is written outside the reports directory.
ESCAPED_RUN_ID = "../../../escaped-runid"

HASH_SCRIPT = r"""
set -eu
{
  for f in /etc/fstab /etc/nccl.conf /etc/default/irqbalance /etc/default/grub \
           /etc/security/limits.d/60-stacktune-memlock.conf; do
    if [ -e "$f" ]; then printf '%s %s ' "$f" "$(stat -c '%a %u %g' "$f")"; sha256sum < "$f"; else echo "$f absent"; fi
  done
  for d in /etc/sysctl.d /etc/tmpfiles.d /etc/default/grub.d /etc/security/limits.d; do
    if [ -d "$d" ]; then
      echo "$d $(stat -c '%a %u %g' "$d")"
      find "$d" -mindepth 1 | sort | while read -r f; do printf '%s %s ' "$f" "$(stat -c '%a %u %g' "$f")"; \
        if [ -f "$f" ]; then sha256sum < "$f"; else echo dir; fi; done
    else
      echo "$d absent"
    fi
  done
  for k in vm/swappiness vm/dirty_ratio vm/dirty_background_ratio kernel/numa_balancing vm/max_map_count \
           vm/overcommit_memory; do
    printf '%s=%s\n' "$k" "$(cat /proc/sys/$k 2>/dev/null || echo unreadable)"
  done
  cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo "thp unreadable"
  grep ' /dev/shm ' /proc/mounts || echo "/dev/shm unmounted"
} | sha256sum | cut -d' ' -f1
"""
# Where a run that changed nothing must not have left anything either.
UNTOUCHED = "/var/lib/stacktune /var/lib/node_exporter /var/lib/prometheus"


def read_file(path):
    with open(path, errors="replace") as handle:
        return handle.read()


# How every playbook of the driver runs: the collection and roles of this working tree, the
# containers through the podman connection plugin.
ANSIBLE_ENV = {
    "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
    "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, "collections"),
    "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles"),
    "ANSIBLE_CONNECTION_PLUGINS": CONNECTION_PLUGINS,
    "ANSIBLE_FORCE_COLOR": "0",
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_FORKS": "20",
}


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def at_once(work, items):
    """work(item) for every item, each in a thread of its own; every item's Failure is reported together."""
    import threading

    failures = []

    def guarded(item):
        try:
            work(item)
        except Failure as exc:
            failures.append(str(exc))

    threads = [threading.Thread(target=guarded, args=(item,)) for item in items]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check(not failures, "; ".join(failures))


class Driver(object):
    def __init__(self, podman):
        self.podman = podman
        self.work = tempfile.mkdtemp(prefix="stacktune-safety-")
        self.logs = []
        self.counts = {}

    # ------------------------------------------------------------ plumbing
    def inventory(self, name, hosts, host_vars=None, common=None):
        data = {
            "all": {
                "hosts": {},
                "vars": {
                    # podman exec with pipelining (tests/molecule/plugins/connection/podman.py)
                    "ansible_connection": "podman",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "stacktune_layers": LAYERS,
                    "stacktune_gate": False,
                    "stacktune_bench_workload": "command",
                    "stacktune_bench_command": ["sh", "-c", STEADY],
                    "stacktune_bench_steps": 30,
                    "stacktune_bench_warmup": 5,
                    "stacktune_bench_timeout": 60,
                    "kernel_sysctl": {"vm.overcommit_memory": "1"},
                    "kernel_cmdline_args": {"pcie_aspm": "off"},
                    "memory_shm_size": "1G",
                    # Prometheus textfile output is monitoring, not a setting: off here, so
                    # "nothing changed" means nothing at all (the bad-input runs leave it on)
                    "metrics_enabled": False,
                },
            }
        }
        data["all"]["vars"].update(common or {})
        for host in hosts:
            data["all"]["hosts"][host] = dict((host_vars or {}).get(host, {}))
        path = os.path.join(self.work, "%s.json" % name)
        with open(path, "w") as handle:
            json.dump(data, handle)
        return path

    def playbook(self, name, playbook, inventory, extra=None, env=None, callback=None, wait=True, args=()):
        reports = os.path.join(self.work, "reports-" + name)
        argv = [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            inventory,
            os.path.join(REPO, playbook),
            "-e",
            # one batch, and a killed host must not stop the others (tune.yml's canary rollout)
            json.dumps(
                dict(
                    {
                        "stacktune_report_dir": reports,
                        "stacktune_run_id": name,
                        "stacktune_serial": ["100%"],
                        "stacktune_max_fail_percentage": 100,
                    },
                    **(extra or {}),
                )
            ),
        ] + list(args)
        full_env = dict(os.environ)
        full_env.update(ANSIBLE_ENV)
        if callback:
            full_env["ANSIBLE_STDOUT_CALLBACK"] = callback
        full_env.update(env or {})
        log = os.path.join(self.work, name + ".log")
        handle = open(log, "w")  # noqa: SIM115 - closed by finish() once the run ends
        # its own process group, so that a test can kill the controller's whole group
        proc = subprocess.Popen(
            argv, stdout=handle, stderr=subprocess.STDOUT, env=full_env, cwd=REPO, start_new_session=True
        )
        self.logs.append(log)
        run = {
            "proc": proc,
            "inventory": inventory,
            "log": log,
            "handle": handle,
            "reports": os.path.join(reports, name),
            "name": name,
            "started": time.time(),
        }
        return self.finish(run) if wait else run

    def runner(self, name, playbook, inventory, extra=None, args=()):
        """The run as AWX and schedulers make it: through ansible-runner, read from its events."""
        import ansible_runner  # only this phase needs it (requirements-test.txt)

        private = os.path.join(self.work, "runner-" + name)
        os.makedirs(private)
        reports = os.path.join(self.work, "reports-" + name)
        started = time.time()
        result = ansible_runner.run(
            private_data_dir=private,
            playbook=os.path.join(REPO, playbook),
            inventory=inventory,
            extravars=dict(
                {"stacktune_report_dir": reports, "stacktune_run_id": name, "stacktune_serial": ["100%"]},
                **(extra or {}),
            ),
            envvars=dict(ANSIBLE_ENV, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")),
            cmdline=" ".join(args) or None,
            quiet=True,
        )
        self.logs.extend(
            os.path.join(root, f) for root, _dirs, files in os.walk(os.path.join(private, "artifacts")) for f in files
        )
        return {
            "rc": result.rc,
            "status": result.status,
            "events": list(result.events),
            "reports": os.path.join(reports, name),
            "name": name,
            "seconds": time.time() - started,
        }

    @staticmethod
    def finish(run, timeout=900):
        run["proc"].wait(timeout)
        run["handle"].close()
        with open(run["log"]) as handle:
            run["out"] = handle.read()
        run["rc"] = run["proc"].returncode
        run["seconds"] = time.time() - run["started"]
        return run

    def kill_env(self, kills):
        """PATH with a podman that hands each container its kill point (STACKTUNE_TEST_KILL_AT)."""
        return self.hook_env({host: {"STACKTUNE_TEST_KILL_AT": point} for host, point in kills.items()})

    def hook_env(self, hooks):
        """PATH with a podman and a runc that add each container's test hooks to the module's environment.

        ``hooks``: {container: {VARIABLE: value}} (STACKTUNE_TEST_KILL_AT, STACKTUNE_TEST_PAUSE_AT).
        The test connection enters a container with ``podman exec`` (by name) or, where podman runs
        it with runc, ``runc exec`` (by id): both are wrapped.
        """
        bindir = tempfile.mkdtemp(prefix="bin-", dir=self.work)
        table = os.path.join(bindir, "hooks")
        with open(table, "w") as handle:
            for host, env in sorted(hooks.items()):
                ident = subprocess.run(
                    [self.podman, "inspect", "--format", "{{.Id}}", host], capture_output=True, text=True, check=False
                ).stdout.strip()
                for name, value in sorted(env.items()):
                    handle.write("%s %s=%s\n" % (host, name, value))
                    if ident:
                        handle.write("%s %s=%s\n" % (ident, name, value))
        env = {
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "STACKTUNE_REAL_PODMAN": self.podman,
            "STACKTUNE_SAFETY_HOOKS": table,
        }
        programs = ["podman"]
        runc = shutil.which("runc")
        if runc:
            env["STACKTUNE_REAL_RUNC"] = runc
            programs.append("runc")
        for program in programs:
            wrapper = os.path.join(bindir, program)
            with open(wrapper, "w") as handle:
                handle.write(HOOK_WRAPPER % HOOK_CALLS[program])
            os.chmod(wrapper, 0o755)
        return env

    def sh(self, host, script, check_rc=True):
        proc = subprocess.run(
            [self.podman, "exec", "-i", host, "sh", "-s"], input=script, capture_output=True, text=True, check=False
        )
        if check_rc:
            check(proc.returncode == 0, "%s: %s" % (host, proc.stderr))
        return proc.stdout

    def lock_holder(self, host):
        """The run id that holds the host's lock now, or None."""
        text = self.sh(host, "cat /var/lib/stacktune/run.lock 2>/dev/null || true").strip()
        holder = (json.loads(text).get("holder") or {}) if text else {}
        return holder.get("run_id")

    def state_hash(self, host):
        return self.sh(host, HASH_SCRIPT).strip()

    def untouched(self, host):
        return self.sh(host, "for p in %s; do test -e $p && echo $p; done; true" % UNTOUCHED).split()

    def journal(self, host, layer):
        text = self.sh(host, "cat /var/lib/stacktune/layers/%s.json 2>/dev/null || true" % layer)
        return json.loads(text) if text.strip() else None

    @staticmethod
    def report(run, host):
        with open(os.path.join(run["reports"], host + ".json")) as handle:
            return json.load(handle)

    @staticmethod
    def recap_failed(out, host):
        match = re.search(r"^%s\s+:.*failed=(\d+)" % re.escape(host), out, re.M)
        return int(match.group(1)) if match else None

    def timed(self, label, run):
        self.counts.setdefault("seconds", {})[label] = round(run["seconds"])
        return run

    # ------------------------------------------------------------ phases
    def run(self):
        started = time.time()
        pre = {h: self.state_hash(h) for h in ALL}
        self.bad_inputs(pre[REF])
        final = self.check_and_tune(pre)
        self.hygiene_files()
        self.crash_and_concurrency(final)
        self.rollback(pre)
        self.signals_and_hostile_hosts()
        self.hygiene_logs()
        self.counts["total_seconds"] = round(time.time() - started)
        print("safety summary: %s" % json.dumps(self.counts, sort_keys=True))

    def bad_inputs(self, before):
        """Every case on its own inventory alias of the reference host, one run per playbook."""
        by_playbook = {}
        for playbook, name, extra, var in BAD_INPUTS:
            by_playbook.setdefault(playbook, []).append((name, extra, var))
        covered_vars = set()
        for playbook, cases in sorted(by_playbook.items()):
            host_vars = {"bad-" + name: dict(extra, ansible_host=REF) for name, extra, _var in cases}
            label = "bad-" + os.path.basename(playbook).split(".")[0]
            run = self.timed(
                label,
                self.playbook(
                    label,
                    playbook,
                    # metrics on (their default): a refused run must not write them either
                    self.inventory(label, sorted(host_vars), host_vars, common={"metrics_enabled": True}),
                    callback="ansible.posix.json",
                ),
            )
            check(run["rc"] != 0, "%s accepted every bad input" % playbook)
            data = json.loads(run["out"][run["out"].index("{") :])
            failures, changed = {}, []
            for play in data["plays"]:
                for task in play["tasks"]:
                    for host, result in task["hosts"].items():
                        if result.get("failed") and host not in failures:
                            # a loop's failure carries each failed item's message in results
                            items = [r.get("msg", "") for r in result.get("results", []) if r.get("failed")]
                            failures[host] = "%s: %s" % (
                                task["task"]["name"],
                                " ".join([result.get("msg", "")] + items),
                            )
                        # the plan's predictions run in check mode: "would change" changes nothing
                        predicted = task["task"]["name"].startswith("stacktune.gpu.layer : Predict what applying")
                        if result.get("changed") and not predicted:
                            changed.append((host, task["task"]["name"]))
            check(not changed, "bad input changed something: %s" % changed)
            for name, _extra, var in cases:
                msg = failures.get("bad-" + name)
                check(msg is not None, "bad input %s was accepted by %s" % (name, playbook))
                check(var in msg, "bad input %s: message does not name %s: %s" % (name, var, msg))
                covered_vars.add(var)
            check(self.state_hash(REF) == before, "bad input to %s changed the host" % playbook)
            left = self.untouched(REF)
            check(not left, "bad input to %s created %s" % (playbook, left))
        self.escaped_run_id(before)
        covered_vars.add("stacktune_run_id")
        escapes = [case for case in BAD_INPUTS if case[1].startswith("line-")]
        check(
            not self.sh(REF, "test -e /tmp/stacktune-escaped && echo ran; true").strip(),
            "a command substitution in a variable ran on the host",
        )
        print(
            "bad input: %d cases (%d variables, %d playbooks) rejected before any host change, each naming its"
            " variable;"
            " %d of them a command substitution or U+2028 in each of %d variables written into a line of a file, and a"
            " run id naming a directory outside the reports"
            % (len(BAD_INPUTS) + 1, len(covered_vars), len(by_playbook) + 1, len(escapes), len({c[3] for c in escapes}))
        )
        self.counts["bad_inputs"] = len(BAD_INPUTS) + 1
        self.counts["bad_input_variables"] = len(covered_vars)

    def escaped_run_id(self, before):
        """stacktune_run_id as -e gives it, naming a directory outside stacktune_report_dir."""
        run = self.timed(
            "bad-run-id",
            self.playbook(
                "bad-run-id", TUNE, self.inventory("bad-run-id", [REF]), extra={"stacktune_run_id": ESCAPED_RUN_ID}
            ),
        )
        reports = os.path.join(self.work, "reports-bad-run-id")
        outside = os.path.normpath(os.path.join(reports, ESCAPED_RUN_ID))
        check(run["rc"] != 0, "a run id outside the reports directory was accepted")
        check(
            "stacktune_run_id must be a name without path separators" in run["out"],
            "the refused run id is not named: %s" % run["out"][-2000:],
        )
        check(not os.path.exists(outside), "a run id wrote %s, outside the reports directory" % outside)
        check(not os.path.exists(reports) or not os.listdir(reports), "a refused run wrote reports: %s" % reports)
        check(self.state_hash(REF) == before, "a refused run id changed the host")
        left = self.untouched(REF)
        check(not left, "a refused run id created %s" % left)

    def check_and_tune(self, pre):
        """Check mode on the reference host, then one tuning run on every host at once."""
        host_vars = {host: {"stacktune_layers": KILLED_LAYERS} for host in KILLS}
        host_vars[MEASURE_KILL] = dict(
            GATED, stacktune_layers=KILLED_LAYERS, stacktune_bench_command=["sh", "-c", KILL_WHILE_MEASURING]
        )
        predicted = self.timed("check", self.playbook("check", TUNE, self.inventory("check", [REF]), args=["--check"]))
        check(predicted["rc"] == 0, "check run failed:\n" + predicted["out"][-3000:])
        check(self.state_hash(REF) == pre[REF], "check mode changed the host")
        check(not self.untouched(REF), "check mode created the journal")
        events = self.timed(
            "check-runner", self.runner("check-runner", TUNE, self.inventory("check-runner", [REF]), args=["--check"])
        )
        self.check_events(events, predicted)
        check(self.state_hash(REF) == pre[REF], "check mode through ansible-runner changed the host")
        tuned = self.timed(
            "tune", self.playbook("tune", TUNE, self.inventory("tune", ALL, host_vars), env=self.kill_env(KILLS))
        )
        check(self.recap_failed(tuned["out"], REF) == 0, "reference run failed:\n" + tuned["out"][-4000:])
        self.check_output(predicted["out"], tuned["out"])
        self.check_fidelity(self.report(predicted, REF), self.report(tuned, REF))
        final = self.state_hash(REF)
        check(final != pre[REF], "the reference run changed nothing")
        for host, point in sorted(KILLS.items()):
            check(self.recap_failed(tuned["out"], host) == 1, "%s was not killed at %s" % (host, point))
            layer = point.split("@")[1]
            entry = self.journal(host, layer)
            check(
                entry and entry["state"] == "applying", "%s: journal of %s not left applying: %s" % (host, layer, entry)
            )
        check(self.recap_failed(tuned["out"], MEASURE_KILL) == 1, "measurement kill did not happen")
        # the run itself put the layer it measured back (unjudged) and gave the host back
        entry = self.journal(MEASURE_KILL, "nccl")
        check(
            entry["state"] == "new" and (entry.get("interrupted") or {}).get("reason", "").startswith("not judged: "),
            "nccl was not put back after its bench module was killed: %s" % entry,
        )
        check(self.lock_holder(MEASURE_KILL) is None, "the run whose bench module was killed kept the host locked")
        return final

    def check_output(self, predicted, real):
        """What a person running tune.yml reads (the stacktune.gpu.stacktune callback of ansible.cfg)."""
        plan = re.findall(r"^    (\w+): (\d+) to change \(", predicted, re.M)
        check(plan, "check run printed no plan:\n" + predicted[-3000:])
        for layer in LAYERS:
            check(
                re.search(r"^    %s: (would change \d+ setting|nothing to change)" % layer, predicted, re.M),
                "check run does not say what %s would change:\n%s" % (layer, predicted[-3000:]),
            )
            check(
                re.search(r"^    %s: (kept|ROLLED BACK|nothing to change)" % layer, real, re.M),
                "tune run does not give the decision on %s:\n%s" % (layer, real[-3000:]),
            )
        for out, run in ((predicted, "check"), (real, "tune")):
            check(
                re.search(r"^  reports:\n(    .*\n)*    %s: \S+/%s/%s\.md" % (REF, run, REF), out, re.M),
                "%s run does not name its report:\n%s" % (run, out[-2000:]),
            )
        print(
            "output: the check run printed the plan (%d layers with changes) and what each layer would change; "
            "the tune run gave every layer's decision; both named their report" % len(plan)
        )

    def check_events(self, run, predicted):
        """What a scheduler reads from ansible-runner: the plan, each layer's outcome and the report path."""
        check(
            run["rc"] == 0 and run["status"] == "successful", "runner check run: %s rc=%s" % (run["status"], run["rc"])
        )

        def messages(task):
            return [
                e["event_data"]["res"].get("msg")
                for e in run["events"]
                if e.get("event") == "runner_on_ok"
                and e["event_data"].get("task") == task
                and e["event_data"].get("host") == REF
            ]

        plan = messages("Show the plan - what each layer will change, and what another file overrides at the next boot")
        outcome = messages("Show the outcome per layer")
        check(len(plan) == 1 and len(outcome) == 1, "runner events hold no plan or outcome: %s %s" % (plan, outcome))
        planned = {line.split(":")[0]: line for line in plan[0] if not line.startswith(" ")}
        told = {line.split(":")[0]: line for line in outcome[0]}
        # the outcome's last line names the report, for runs with Ansible's own output too
        where = told.pop("report", "")
        # and the next commands, one "next: " line each (the stacktune callback gives them at the recap)
        check("next" in told, "the outcome does not give the next commands: %s" % outcome[0])
        told.pop("next", None)
        check(where.endswith("/%s/%s.md" % (run["name"], REF)), "the outcome does not name the report: %s" % outcome[0])
        check(sorted(planned) == sorted(LAYERS), "the plan event does not list every layer: %s" % plan[0])
        check(sorted(told) == sorted(LAYERS), "the outcome event does not give every layer: %s" % outcome[0])
        # the structured plan says the same as the report and the text output of the same check
        report = self.report(run, REF)
        for layer in report["layers"]:
            n = len([r for r in layer["settings"] if r["changed"]])
            want = ("would change %d setting(s)" % n) if n else "nothing to change"
            check(want in told[layer["layer"]], "runner outcome of %s: %s (report: %d)" % (layer["layer"], told, n))
            check(("%d to change" % n if n else "nothing to change") in planned[layer["layer"]], "plan of %s" % layer)
            check("    %s: %s" % (layer["layer"], want) in predicted["out"], "text and events disagree on %s" % layer)
        stats = [e for e in run["events"] if e.get("event") == "playbook_on_stats"]
        artifacts = stats[-1]["event_data"].get("artifact_data") or {} if stats else {}
        reports = artifacts.get("stacktune_reports") or []
        check(
            any(("%s/%s.md" % (run["name"], REF)) in line for line in reports),
            "the stats event does not name the report: %s" % artifacts,
        )
        changed = sum(1 for layer in report["layers"] for r in layer["settings"] if r["changed"])
        print(
            "events: through ansible-runner, the check run's events held the plan and the outcome of all %d layers "
            "(%d settings would change, as in the report and the text output) and the stats named the report"
            % (len(LAYERS), changed)
        )
        self.counts["runner_events"] = len(run["events"])

    def check_fidelity(self, predicted, real):
        layers, settings = 0, 0
        real_layers = {r["layer"]: r for r in real["layers"]}
        check(predicted["check_mode"] and not real["check_mode"], "reports are not a check run and a real run")
        for layer in predicted["layers"]:
            actual = real_layers[layer["layer"]]
            want = {r["id"]: r["changed"] for r in layer["settings"]}
            got = {r["id"]: r["changed"] for r in actual["settings"]}
            check(
                want == got,
                "check mode mispredicted layer %s: predicted %s, real %s" % (layer["layer"], want, got),
            )
            layers += 1
            settings += len(want)
        check(layers == len(LAYERS), "check fidelity covered %d layers" % layers)
        print("check-mode fidelity: %d layers, %d settings predicted exactly" % (layers, settings))
        self.counts["check_layers"] = layers
        self.counts["check_settings"] = settings

    def crash_and_concurrency(self, final):
        """Re-run the killed hosts while the reference host takes two concurrent runs."""
        killed = {"stacktune_layers": KILLED_LAYERS}
        rerun = self.playbook("rerun", TUNE, self.inventory("rerun", sorted(KILLS), common=killed), wait=False)
        # the run whose bench module was killed put the nccl layer back and freed the host:
        # the next run takes it as usual and measures the layer again
        rerun_m = self.playbook(
            "rerun-m", TUNE, self.inventory("rerun-m", [MEASURE_KILL], common=dict(GATED, **killed)), wait=False
        )
        self.concurrency()
        for run in (self.finish(rerun), self.finish(rerun_m)):
            self.timed(run["name"], run)
            check(run["rc"] == 0, "re-run %s failed:\n%s" % (run["name"], run["out"][-4000:]))
        for host in [MEASURE_KILL] + sorted(KILLS):
            check(self.state_hash(host) == final, "%s: re-run did not converge to the reference state" % host)
        events = [
            json.loads(line) for line in self.sh(MEASURE_KILL, "cat /var/lib/stacktune/events.jsonl").splitlines()
        ]
        put_back = [(e["layer"], e["run_id"]) for e in events if e.get("action") in ("interrupted", "recover")]
        check(put_back == [("nccl", "tune")], "after the measurement kill the layer was put back by %s" % put_back)
        print("crash safety: %d kill points on real containers, every re-run converged" % (len(KILLS) + 1))
        self.counts["kill_points"] = sorted(KILLS.values()) + ["during_measurement@nccl"]

    def concurrency(self):
        # the first run's first block waits until the other runs were refused
        release = "/run/stacktune-release-first"
        self.sh(REF, "rm -f %s" % release)
        wait = "while [ ! -e %s ]; do sleep 0.5; done; " % release
        # another interface list, so that the nccl layer changes on the tuned host and is measured
        slow = dict(
            GATED,
            stacktune_layers=["nccl"],
            nccl_socket_ifname="^lo,docker0,stacktune-test",
            stacktune_bench_command=["sh", "-c", wait + STEADY],
            stacktune_bench_timeout=600,
        )
        first = self.playbook("first", TUNE, self.inventory("first", [REF], common=slow), wait=False)
        deadline = time.time() + 300
        while self.lock_holder(REF) != "first":
            check(time.time() < deadline and first["proc"].poll() is None, "first run never took the lock")
            time.sleep(0.5)
        second = self.playbook("second", TUNE, self.inventory("second", [REF]), wait=False)
        # one lock per host: another journal directory does not make a second run welcome
        other = self.playbook(
            "second-journal",
            TUNE,
            self.inventory("second-journal", [REF], common={"stacktune_journal_dir": "/var/lib/stacktune-other"}),
            wait=False,
        )
        for run in (self.finish(second), self.finish(other)):
            check(run["rc"] != 0, "%s was not refused" % run["name"])
            named = "locked by stacktune run first" in run["out"]
            check(named, "refusal of %s does not name the first run" % run["name"])
        check(first["proc"].poll() is None, "the first run ended before the second was refused")
        check(
            self.sh(REF, "test -e /var/lib/stacktune-other/layers && echo there || true").strip() == "",
            "the run with another journal directory wrote a journal",
        )
        direct = self.playbook("direct", "tests/integration/direct-write.yml", self.inventory("direct", [REF]))
        check(direct["rc"] != 0 and "locked by stacktune run first" in direct["out"], "a direct write was not refused")
        self.sh(REF, "touch %s" % release)
        first = self.timed("first", self.finish(first))
        check(first["rc"] == 0, "first run failed:\n" + first["out"][-4000:])
        events = self.sh(REF, "cat /var/lib/stacktune/events.jsonl")
        runs = {json.loads(line)["run_id"] for line in events.splitlines() if line.strip()}
        check(not runs & {"second", "second-journal", "direct"}, "the refused runs wrote: %s" % runs)
        check(self.lock_holder(REF) is None, "lock left")
        print(
            "concurrency: a second run, a run with another journal directory and a direct write were refused "
            "while the first held the host"
        )
        self.counts["concurrent_runs_refused"] = 3

    def rollback(self, pre):
        """Someone else edits managed files; rollback still returns every host to its pre-tune hash."""
        self.sh(
            REF,
            "echo 'NCCL_DEBUG=INFO  # added by hand' >> /etc/nccl.conf; "
            "echo '* hard nofile 4096' >> /etc/security/limits.d/60-stacktune-memlock.conf; "
            "rm -f /etc/default/grub.d/60-stacktune-kernel.cfg",
        )
        back = self.timed(
            "rollback", self.playbook("rollback", "playbooks/rollback.yml", self.inventory("rollback", ALL))
        )
        check(back["rc"] == 0, "rollback failed:\n" + back["out"][-4000:])
        for host in ALL:
            check(self.state_hash(host) == pre[host], "%s: rollback did not restore the pre-tune state" % host)
        print("rollback: %d hosts back to their exact pre-tune hash (one edited by hand after tuning)" % len(ALL))
        self.counts["rollback_hosts"] = len(ALL)
        # a stacktune file that no journal owns (its journal was deleted) is named, and left alone
        orphan = "/etc/nccl.conf"
        self.sh(REF, "printf '# Managed by stacktune (layer nccl). x\\nNCCL_DEBUG=WARN\\n' > %s" % orphan)
        again = self.playbook("rollback-orphan", "playbooks/rollback.yml", self.inventory("rollback-orphan", [REF]))
        check(again["rc"] == 0, "rollback without a journal failed:\n" + again["out"][-3000:])
        check(
            re.search(r"WARNING: %s carry stacktune's header\s+but no journal" % re.escape(orphan), again["out"]),
            "rollback did not name the file no journal owns:\n" + again["out"][-3000:],
        )
        check(self.sh(REF, "cat %s; rm %s" % (orphan, orphan)).endswith("NCCL_DEBUG=WARN\n"), "the orphan was changed")
        print("rollback: a stacktune file that no journal owns is named and left alone")

    def signals_and_hostile_hosts(self):
        """The signal cases and the hostile-host cases at once, on containers of their own."""
        at_once(lambda phase: phase(), (self.signals, self.hostile_hosts))

    def hostile_hosts(self):
        """Links, foreign-owned and world-writable journals, duplicate lines, no final newline."""
        covered = []
        started = time.time()
        common = {"stacktune_gate": False}

        def host_cases(host):
            pre = self.state_hash(host)
            # the journal cases need a journal: tune nccl once (rolled back at the end)
            if any("journal record" in case[0] for case in HOSTILE[host]):
                first = self.playbook(
                    "hostile-%s-setup" % host,
                    TUNE,
                    self.inventory("h-%s" % host, [host], common=dict(common, stacktune_layers=["nccl"])),
                )
                check(first["rc"] == 0, "%s: the setup run failed:\n%s" % (host, first["out"][-2000:]))
            for n, (what, plant, extra, playbook, needle, clean) in enumerate(HOSTILE[host]):
                self.sh(host, plant)
                planted = self.state_hash(host)
                name = "hostile-%s-%d" % (host, n)
                run = self.playbook(name, playbook, self.inventory(name, [host], common=dict(common, **extra)))
                label = "%s (%s)" % (what, host)
                if needle is None:
                    check(run["rc"] == 0, "%s: the run failed:\n%s" % (label, run["out"][-2000:]))
                    # only this case's layers: the journal cases keep another layer tuned meanwhile
                    only = dict(extra, stacktune_rollback_layers=extra["stacktune_layers"])
                    back = self.playbook(
                        name + "-rollback",
                        "playbooks/rollback.yml",
                        self.inventory(name + "-rb", [host], common=only),
                    )
                    check(back["rc"] == 0, "%s: the rollback failed" % label)
                    check(self.state_hash(host) == planted, "%s: not back byte for byte after the rollback" % label)
                else:
                    check(
                        run["rc"] != 0 and needle in run["out"],
                        "%s was not refused with %r:\n%s" % (label, needle, run["out"][-2500:]),
                    )
                    check(self.state_hash(host) == planted, "%s: the refused run changed the host" % label)
                self.sh(host, clean)
                covered.append(what)
            back = self.playbook(
                "hostile-%s-rollback" % host, "playbooks/rollback.yml", self.inventory("h-rb-%s" % host, [host])
            )
            check(back["rc"] == 0, "%s: the last rollback failed:\n%s" % (host, back["out"][-2000:]))
            check(self.state_hash(host) == pre, "%s: not back to its state before the hostile cases" % host)

        at_once(host_cases, sorted(HOSTILE))
        self.counts.setdefault("seconds", {})["hostile"] = round(time.time() - started)
        print(
            "hostile hosts: %d faults on real containers (%s) were each refused before any change, naming the path, "
            "or went back byte for byte" % (len(covered), "; ".join(covered))
        )
        self.counts["hostile_cases"] = covered

    def signals(self):
        """Stop the controller while the gate measures, in every way a user or scheduler does."""
        pre = {h: self.state_hash(h) for h in SIGNAL_CASES}
        covered = []

        def host_cases(host):
            for n, (signame, where, group) in enumerate(SIGNAL_CASES[host]):
                self.signal_case(host, signame, where, group, n, pre[host])
                covered.append("%s during %s" % (signame, where))

        started = time.time()
        at_once(host_cases, sorted(SIGNAL_CASES))
        self.counts.setdefault("seconds", {})["signals"] = round(time.time() - started)
        # the next run measures every interrupted layer again; rollback then gives the exact original
        hosts = sorted(SIGNAL_CASES)
        again = self.timed(
            "signals-rerun",
            self.playbook(
                "signals-rerun",
                TUNE,
                self.inventory(
                    "signals-rerun",
                    hosts,
                    common=dict(GATED, stacktune_layers=["nccl"], stacktune_bench_command=["sh", "-c", STEADY]),
                ),
            ),
        )
        check(again["rc"] == 0, "the run after the interruptions failed:\n" + again["out"][-3000:])
        for host in hosts:
            nccl = [r for r in self.report(again, host)["layers"] if r["layer"] == "nccl"][0]
            check(
                nccl["decision"] == "keep" and (nccl["gate"] or {}).get("blocks", {}).get("with", 0) >= 2,
                "%s: the run after the interruptions did not measure the nccl layer again: %s"
                % (host, nccl.get("gate")),
            )
        back = self.playbook("signals-rollback", "playbooks/rollback.yml", self.inventory("signals-rollback", hosts))
        check(back["rc"] == 0, "rollback after the interruptions failed:\n" + back["out"][-3000:])
        for host in hosts:
            check(self.state_hash(host) == pre[host], "%s: rollback did not restore the pre-tune state" % host)
        print(
            "signals: %d interruptions (%s) left every host as before the layer, with no process left, "
            "the lock free and the journal saying interrupted; the next run measured the layer again and "
            "rollback gave the exact original state" % (len(covered), ", ".join(sorted(set(covered))))
        )
        self.counts["signal_cases"] = sorted(covered)

    def signal_case(self, host, signame, where, group, n, pre):
        marker = MARKERS[where]
        self.sh(host, "rm -f %s" % " ".join(MARKERS.values()))
        self.sh(host, "echo %s > %s" % (where, HOLD) if where in ("with", "without") else "rm -f %s" % HOLD)
        name = "sig-%s-%d" % (host, n)
        common = dict(GATED, stacktune_layers=["nccl"], stacktune_bench_command=["sh", "-c", MARKED + STEADY])
        env = self.hook_env({host: {"STACKTUNE_TEST_PAUSE_AT": "mid_suspend@nccl"}}) if where == "switch" else None
        run = self.playbook(name, TUNE, self.inventory(name, [host], common=common), env=env, wait=False)
        deadline = time.time() + 300
        while self.sh(host, "test -e %s && echo here || true" % marker).strip() != "here":
            check(
                time.time() < deadline and run["proc"].poll() is None, "%s: %s never reached %s" % (host, name, where)
            )
            time.sleep(0.3)
        time.sleep(0.5)
        sig = getattr(signal, signame)
        if group:
            os.killpg(run["proc"].pid, sig)
        else:
            run["proc"].send_signal(sig)
        run = self.finish(run, timeout=300)
        self.sh(host, "rm -f %s" % HOLD)
        label = "%s: %s during %s" % (host, signame, where)
        # the workers of a killed controller outlive it: wait until every process of the run is gone
        deadline = time.time() + 120
        while subprocess.run(["pgrep", "-f", run["inventory"]], capture_output=True, check=False).returncode == 0:
            check(time.time() < deadline, "%s: processes of the run are still alive" % label)
            time.sleep(0.5)
        deadline = time.time() + 60
        while True:
            left = self.sh(host, OTHER_PROCESSES).strip()
            if not left:
                break
            check(time.time() < deadline, "%s: processes left on the host: %s" % (label, left))
            time.sleep(0.5)
        check(self.state_hash(host) == pre, "%s: the host is not as before the run" % label)
        check(self.lock_holder(host) is None, "%s: the lock is still held" % label)
        entry = self.journal(host, "nccl")
        why = {
            "with": "a block with the layer",
            "without": "a block without the layer",
            "switch": "a switch of the layer",
        }
        who = "the controller process" if signame == "SIGKILL" else signame
        reason = (entry.get("interrupted") or {}).get("reason", "")
        check(
            reason.startswith("interrupted: %s" % who) and reason.endswith("during %s" % why[where]),
            "%s: the journal does not say interrupted: %s" % (label, entry.get("interrupted")),
        )
        check(
            entry.get("state") == "new" and not entry.get("rejected"), "%s: a verdict was recorded: %s" % (label, entry)
        )
        if not group:
            check(
                "stacktune: stopped by %s" % signame in run["out"]
                and "%s: nccl was being measured" % host in run["out"]
                and "Undo the rest:" in run["out"],
                "%s: the last lines do not say what the host was left in:\n%s" % (label, run["out"][-2000:]),
            )

    def hygiene_files(self):
        """Modes and owners on the tuned reference host."""
        modes = self.sh(
            REF,
            "stat -c '%n %a %U %G' /etc/sysctl.d/60-stacktune-kernel.conf /etc/nccl.conf "
            "/etc/security/limits.d/60-stacktune-memlock.conf /etc/default/grub.d/60-stacktune-kernel.cfg "
            "/etc/fstab /var/lib/stacktune /var/lib/stacktune/layers /var/lib/stacktune/layers/*.json "
            "/var/lib/stacktune/events.jsonl /var/lib/stacktune/lock",
        )
        for line in modes.splitlines():
            path, mode, user, group = line.split()
            want = (
                "700"
                if path in ("/var/lib/stacktune", "/var/lib/stacktune/layers")
                else ("600" if path.startswith("/var/lib/stacktune") else "644")
            )
            check(
                (mode, user, group) == (want, "root", "root"),
                "%s is %s %s:%s, want %s root:root" % (path, mode, user, group, want),
            )
        stray = self.sh(REF, "find /etc /var/lib/stacktune -name '.stacktune-*' | head")
        check(stray.strip() == "", "temporary files left: %s" % stray)
        print(
            "hygiene: %d managed paths root-owned with fixed modes (journal 0600), no temporary files"
            % len(modes.splitlines())
        )
        self.counts["hygiene_paths"] = len(modes.splitlines())

    def hygiene_logs(self):
        """No secret in any log: ansible output of every run, the reports, the on-host journals."""
        scanned = 0
        for base, _dirs, files in os.walk(self.work):
            for name in files:
                text = read_file(os.path.join(base, name))
                check(SECRET not in text and LINKED_SECRET not in text, "secret in %s" % name)
                scanned += 1
        for host in ALL + sorted(HOSTILE):
            journal = self.sh(
                host, "cat /var/lib/stacktune/events.jsonl /var/lib/stacktune/layers/*.json 2>/dev/null; true"
            )
            check(SECRET not in journal and LINKED_SECRET not in journal, "secret in the journal of %s" % host)
        print("hygiene: the planted secret is in none of %d logs and reports nor in %d journals" % (scanned, len(ALL)))
        self.counts["secret_scanned_files"] = scanned


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--podman", default=shutil.which("podman") or "/usr/bin/podman")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, inventories)")
    args = parser.parse_args()
    driver = Driver(args.podman)
    try:
        driver.run()
    except Failure as exc:
        print("SAFETY FAILURE: %s" % exc)
        print("logs: %s" % driver.work)
        return 1
    if not args.keep:
        shutil.rmtree(driver.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
