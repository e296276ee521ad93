"""Safety driver: proves on real containers that stacktune never loses a setting.

Run by the molecule scenario ``safety`` (``make test``), or by hand:
    python3 tests/integration/safety.py --hosts safety-ref,safety-k1,... (see molecule/safety)

Phases (each one asserts and prints what it covered):
1. check-mode fidelity: ``tune.yml --check`` then the real run on the reference host;
   per layer and setting, the predicted changes equal the real ones.
2. crash safety: the same run on hosts killed (SIGKILL) at named points inside the
   engine (the STACKTUNE_TEST_KILL_AT test hook) and during a measurement; a re-run
   ends in the reference host's state (hash of every managed file and live value).
3. concurrency: a second run against a host while a first one holds it is refused with
   a message naming the first; a direct write of another run id is refused too.
4. rollback: ``rollback.yml`` returns every host to its pre-tune hash.
5. bad input: every case of the corpus fails before any host change, naming its variable.
6. hygiene: modes and owners of managed files and of the journal, no secret in any log,
   no shell strings built from variables in the roles, playbooks and modules.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SECRET = "S3cretSmbPassw0rd"  # planted in /etc/fstab by prepare; must never be logged
LAYERS = ["bios", "driver", "memory", "kernel", "numa_irq", "gpu_settings", "nccl"]
KILLS = {
    "safety-k1": "after_journal_write_ahead@memory",
    "safety-k2": "mid_unit_write@kernel",
    "safety-k3": "after_units_written@kernel",
    "safety-k4": "after_live_written@nccl",
    "safety-k5": "before_journal_final@memory",
}
MEASURE_KILL = "safety-m"  # SIGKILLed while the kernel layer is being measured
REF = "safety-ref"
BAD = "safety-bad"

# A deterministic workload: the gate's decisions do not depend on machine noise here
# (improve -> rollback, no_regression -> keep), so runs can be compared setting by setting.
STEADY = "for i in $(seq 40); do echo 1.0; done"
KILL_WHILE_MEASURING = (
    "if [ -e /etc/sysctl.d/60-stacktune-kernel.conf ] && [ ! -e /root/measure-killed ]; then "
    "touch /root/measure-killed; kill -KILL $PPID; sleep 5; fi; " + STEADY
)

# name, extra vars, variable the message must name
BAD_INPUTS = [
    ("layers-unknown", {"stacktune_layers": ["memory", "no_such_layer"]}, "stacktune_layers"),
    ("layers-type", {"stacktune_layers": "memory"}, "stacktune_layers"),
    ("gate-type", {"stacktune_gate": "perhaps"}, "stacktune_gate"),
    ("policy-choice", {"stacktune_gate_default_policy": "sometimes"}, "stacktune_gate_default_policy"),
    ("policies-value", {"stacktune_gate_policies": {"kernel": "always"}}, "stacktune_gate_policies"),
    ("quantile-range", {"stacktune_gate_tail_quantile": 1.5}, "stacktune_gate_tail_quantile"),
    ("tolerance-negative", {"stacktune_gate_tail_tolerance": -0.1}, "stacktune_gate_tail_tolerance"),
    ("confidence-range", {"stacktune_gate_confidence": 2}, "stacktune_gate_confidence"),
    ("steps-type", {"stacktune_bench_steps": "many"}, "stacktune_bench_steps"),
    ("steps-zero", {"stacktune_bench_steps": 0}, "stacktune_bench_steps"),
    ("workload-choice", {"stacktune_bench_workload": "bitcoin"}, "stacktune_bench_workload"),
    (
        "command-empty",
        {"stacktune_bench_workload": "command", "stacktune_bench_command": []},
        "stacktune_bench_command",
    ),
    ("journal-relative", {"stacktune_journal_dir": "var/lib/x"}, "stacktune_journal_dir"),
    ("sysctl-missing", {"kernel_sysctl": {"vm.no_such_knob": "1"}}, "kernel_sysctl"),
    ("sysctl-name", {"kernel_sysctl": {"vm swappiness": "1"}}, "kernel_sysctl"),
    ("sysctl-newline", {"kernel_sysctl": {"vm.swappiness": "1\nkernel.panic = 1"}}, "kernel_sysctl"),
    ("sysctl-type", {"kernel_sysctl": ["vm.swappiness=1"]}, "kernel_sysctl"),
    ("profile-choice", {"kernel_profile": "fastest"}, "kernel_profile"),
    ("cmdline-inject", {"kernel_cmdline_args": {"pcie_aspm": "off; reboot"}}, "kernel_cmdline_args"),
    ("aspm-choice", {"kernel_aspm_policy": "turbo"}, "kernel_aspm_policy"),
    ("shm-size", {"memory_shm_size": "-8G"}, "memory_shm_size"),
    ("shm-unit", {"memory_shm_size": "64X"}, "memory_shm_size"),
    ("memlock", {"memory_memlock": "lots"}, "memory_memlock"),
    ("hugepages-negative", {"memory_hugepages": -1}, "memory_hugepages"),
    ("thp-choice", {"memory_thp_enabled": "sometimes"}, "memory_thp_enabled"),
    ("irq-cpulist-backwards", {"numa_irq_cpus_override": {"0000:3b:00.0": "7-3"}}, "numa_irq_cpus_override"),
    ("irq-cpulist-garbage", {"numa_irq_cpus_override": {"0000:3b:00.0": "a,b"}}, "numa_irq_cpus_override"),
    ("irq-pci-address", {"numa_irq_cpus_override": {"3b:00.0": "0-3"}}, "numa_irq_cpus_override"),
    ("irqbalance-path", {"numa_irq_irqbalance_config": "/etc/../root/.bashrc"}, "numa_irq_irqbalance_config"),
    ("nccl-path-unsafe", {"nccl_conf_path": "/root/.ssh/authorized_keys"}, "nccl_conf_path"),
    ("nccl-path-dotdot", {"nccl_conf_path": "/etc/../root/x"}, "nccl_conf_path"),
    ("nccl-env-name", {"nccl_env": {"LD_PRELOAD": "/tmp/x.so"}}, "nccl_env"),
    ("nccl-env-newline", {"nccl_env": {"NCCL_SOCKET_NTHREADS": "4\nLD_PRELOAD=x"}}, "nccl_env"),
    ("power-negative", {"gpu_settings_power_limit_watts": -300}, "gpu_settings_power_limit_watts"),
    ("clocks-format", {"gpu_settings_app_clocks": "fast"}, "gpu_settings_app_clocks"),
    ("compute-mode", {"gpu_settings_compute_mode": "shared"}, "gpu_settings_compute_mode"),
    ("gpus-type", {"gpu_settings_gpus": "first"}, "gpu_settings_gpus"),
    ("driver-version", {"driver_nvidia_version": "latest; rm -rf /"}, "driver_nvidia_version"),
    ("bios-fail-on", {"bios_fail_on": "everything"}, "bios_fail_on"),
    ("psu-negative", {"preflight_psu_capacity_watts": -1}, "preflight_psu_capacity_watts"),
    ("preflight-fail-on", {"preflight_fail_on": "panic"}, "preflight_fail_on"),
]

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


def read_file(path):
    with open(path, errors="replace") as handle:
        return handle.read()


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Driver(object):
    def __init__(self, hosts, podman, keep):
        self.hosts = hosts
        self.podman = podman
        self.work = tempfile.mkdtemp(prefix="stacktune-safety-")
        self.keep = keep
        self.logs = []
        self.counts = {}

    # ------------------------------------------------------------ plumbing
    def inventory(self, name, hosts, host_vars=None, common=None):
        data = {
            "all": {
                "hosts": {},
                "vars": {
                    "ansible_connection": "containers.podman.podman",
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "stacktune_layers": LAYERS,
                    "stacktune_gate": True,
                    "stacktune_gate_rounds": 1,
                    "stacktune_bench_workload": "command",
                    "stacktune_bench_command": ["sh", "-c", STEADY],
                    "stacktune_bench_steps": 30,
                    "stacktune_bench_warmup": 5,
                    "stacktune_bench_timeout": 60,
                    "kernel_sysctl": {"vm.overcommit_memory": "1"},
                    "kernel_cmdline_args": {"pcie_aspm": "off"},
                    "memory_shm_size": "1G",
                    # Prometheus textfile output is monitoring, not a setting: off here, so
                    # "nothing changed" means nothing at all
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
        full_env.update(
            {
                "ANSIBLE_CONFIG": os.path.join(REPO, "ansible.cfg"),
                "ANSIBLE_COLLECTIONS_PATH": os.path.join(REPO, "collections"),
                "ANSIBLE_ROLES_PATH": os.path.join(REPO, "roles"),
                "ANSIBLE_FORCE_COLOR": "0",
                "ANSIBLE_NOCOLOR": "1",
            }
        )
        if callback:
            full_env["ANSIBLE_STDOUT_CALLBACK"] = callback
        full_env.update(env or {})
        log = os.path.join(self.work, name + ".log")
        handle = open(log, "w")  # noqa: SIM115 - closed by finish() once the run ends
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=full_env, cwd=REPO)
        self.logs.append(log)
        run = {"proc": proc, "log": log, "handle": handle, "reports": os.path.join(reports, name), "name": name}
        return self.finish(run) if wait else run

    @staticmethod
    def finish(run, timeout=600):
        run["proc"].wait(timeout)
        run["handle"].close()
        with open(run["log"]) as handle:
            run["out"] = handle.read()
        run["rc"] = run["proc"].returncode
        return run

    def kill_env(self, kills):
        """PATH with a podman that hands each container its kill point (STACKTUNE_TEST_KILL_AT)."""
        bindir = os.path.join(self.work, "bin")
        os.makedirs(bindir, exist_ok=True)
        wrapper = os.path.join(bindir, "podman")
        with open(wrapper, "w") as handle:
            handle.write(
                "#!/bin/sh\n"
                "# podman exec <container> ...: add the container's kill point to the module's environment\n"
                'if [ "$1" = exec ]; then\n'
                '  point=$(printf "%s\\n" $STACKTUNE_SAFETY_KILLS | sed -n "s/^$2=//p")\n'
                '  if [ -n "$point" ]; then shift; exec "$STACKTUNE_REAL_PODMAN" exec '
                '--env "STACKTUNE_TEST_KILL_AT=$point" "$@"; fi\n'
                "fi\n"
                'exec "$STACKTUNE_REAL_PODMAN" "$@"\n'
            )
        os.chmod(wrapper, 0o755)
        return {
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
            "STACKTUNE_REAL_PODMAN": self.podman,
            "STACKTUNE_SAFETY_KILLS": " ".join("%s=%s" % kv for kv in sorted(kills.items())),
        }

    def sh(self, host, script, check_rc=True):
        proc = subprocess.run(
            [self.podman, "exec", "-i", host, "sh", "-s"], input=script, capture_output=True, text=True, check=False
        )
        if check_rc:
            check(proc.returncode == 0, "%s: %s" % (host, proc.stderr))
        return proc.stdout

    def state_hash(self, host):
        return self.sh(host, HASH_SCRIPT).strip()

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

    # ------------------------------------------------------------ phases
    def run(self):
        started = time.time()
        pre = {h: self.state_hash(h) for h in self.hosts}
        kill_hosts = sorted(KILLS) + [MEASURE_KILL]
        host_vars = {MEASURE_KILL: {"stacktune_bench_command": ["sh", "-c", KILL_WHILE_MEASURING]}}

        # 1. check mode on the reference host, then the tuning run on every host at once
        inv_all = self.inventory("tune", [REF] + kill_hosts, host_vars)
        predicted = self.playbook("check", "playbooks/tune.yml", self.inventory("check", [REF]), args=["--check"])
        check(predicted["rc"] == 0, "check run failed:\n" + predicted["out"][-3000:])
        check(self.state_hash(REF) == pre[REF], "check mode changed the host")
        tuned = self.playbook("tune", "playbooks/tune.yml", inv_all, env=self.kill_env(KILLS))
        check(self.recap_failed(tuned["out"], REF) == 0, "reference run failed:\n" + tuned["out"][-4000:])
        self.check_fidelity(self.report(predicted, REF), self.report(tuned, REF))
        final = self.state_hash(REF)
        check(final != pre[REF], "the reference run changed nothing")

        for host, point in sorted(KILLS.items()):
            check(self.recap_failed(tuned["out"], host) == 1, "%s was not killed at %s" % (host, point))
            layer = point.split("@")[1]
            check(
                self.journal(host, layer)["state"] == "applying", "%s: journal of %s not left applying" % (host, layer)
            )
        check(self.recap_failed(tuned["out"], MEASURE_KILL) == 1, "measurement kill did not happen")
        check(self.journal(MEASURE_KILL, "kernel")["state"] == "applied", "kernel not left applied by the kill")

        # 2. re-runs converge (engine kill points: plain tune.yml; the measurement kill needs the
        #    run lock's recovery at the start of the run) while 3. concurrency runs on the reference host
        rerun = self.playbook(
            "rerun", "playbooks/tune.yml", self.inventory("rerun", sorted(KILLS), host_vars), wait=False
        )
        rerun_m = self.playbook(
            "rerun-m",
            "tests/integration/locked-tune.yml",
            self.inventory("rerun-m", [MEASURE_KILL]),
            extra={"stacktune_lock_break": True},
            wait=False,
        )
        self.concurrency()
        for run in (self.finish(rerun), self.finish(rerun_m)):
            check(run["rc"] == 0, "re-run %s failed:\n%s" % (run["name"], run["out"][-4000:]))
        for host in kill_hosts:
            check(self.state_hash(host) == final, "%s: re-run did not converge to the reference state" % host)
        decisions = {r["layer"]: r["decision"] for r in self.report(rerun_m, MEASURE_KILL)["layers"]}
        check(decisions.get("kernel") == "rollback", "after the measurement kill, kernel was %s" % decisions)
        print("crash safety: %d kill points on real containers, every re-run converged" % (len(KILLS) + 1))
        self.counts["container_kill_points"] = len(KILLS) + 1

        # 4. rollback from the tuned state returns every host to its pre-tune hash
        back = self.playbook("rollback", "playbooks/rollback.yml", self.inventory("rollback", [REF] + kill_hosts))
        check(back["rc"] == 0, "rollback failed:\n" + back["out"][-4000:])
        for host in [REF] + kill_hosts:
            check(self.state_hash(host) == pre[host], "%s: rollback did not restore the pre-tune state" % host)
        print("rollback: %d hosts back to their exact pre-tune hash" % (len(kill_hosts) + 1))

        self.bad_inputs()
        self.hygiene()
        print("safety summary: %s (%.0f s)" % (json.dumps(self.counts, sort_keys=True), time.time() - started))

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

    def concurrency(self):
        inv = self.inventory("first", [REF], common={"stacktune_bench_command": ["sh", "-c", "sleep 4; " + STEADY]})
        first = self.playbook("first", "tests/integration/locked-tune.yml", inv, wait=False)
        deadline = time.time() + 120
        while self.sh(REF, "test -e /var/lib/stacktune/run.lock && echo held || true").strip() != "held":
            check(time.time() < deadline and first["proc"].poll() is None, "first run never took the lock")
            time.sleep(0.5)
        second = self.playbook("second", "tests/integration/locked-tune.yml", self.inventory("second", [REF]))
        check(second["rc"] != 0, "second run was not refused")
        check("locked by stacktune run first" in second["out"], "refusal does not name the first run")
        direct = self.playbook(
            "direct",
            "tests/integration/direct-write.yml",
            self.inventory("direct", [REF]),
        )
        check(direct["rc"] != 0 and "locked by stacktune run first" in direct["out"], "a direct write was not refused")
        first = self.finish(first)
        check(first["rc"] == 0, "first run failed:\n" + first["out"][-4000:])
        events = self.sh(REF, "cat /var/lib/stacktune/events.jsonl")
        runs = {json.loads(line)["run_id"] for line in events.splitlines() if line.strip()}
        check(not runs & {"second", "direct"}, "the refused runs wrote: %s" % runs)
        check(self.sh(REF, "test -e /var/lib/stacktune/run.lock && echo held || true").strip() == "", "lock left")
        print("concurrency: a second run and a direct write were refused while the first held the host")
        self.counts["concurrent_runs_refused"] = 2

    def bad_inputs(self):
        before = self.state_hash(BAD)
        hosts, host_vars = [], {}
        for name, extra, _var in BAD_INPUTS:
            alias = "bad-" + name
            hosts.append(alias)
            host_vars[alias] = dict(extra, ansible_host=BAD)
        run = self.playbook(
            "bad", "playbooks/tune.yml", self.inventory("bad", hosts, host_vars), callback="ansible.posix.json"
        )
        data = json.loads(run["out"][run["out"].index("{") :])
        failures, changed = {}, []
        for play in data["plays"]:
            for task in play["tasks"]:
                for host, result in task["hosts"].items():
                    if result.get("failed") and host not in failures:
                        failures[host] = "%s: %s" % (task["task"]["name"], result.get("msg", ""))
                    if result.get("changed"):
                        changed.append((host, task["task"]["name"]))
        check(not changed, "bad input changed something: %s" % changed)
        for name, _extra, var in BAD_INPUTS:
            msg = failures.get("bad-" + name)
            check(msg is not None, "bad input %s was accepted" % name)
            check(var in msg, "bad input %s: message does not name %s: %s" % (name, var, msg))
        check(self.state_hash(BAD) == before, "bad input changed the host")
        check(self.sh(BAD, "test -e /var/lib/stacktune && echo yes || true").strip() == "", "journal was created")
        print("bad input: %d cases rejected before any host change, each naming its variable" % len(BAD_INPUTS))
        self.counts["bad_inputs"] = len(BAD_INPUTS)

    def hygiene(self):
        # managed files and the journal, on a host tuned once more
        run = self.playbook(
            "hygiene", "playbooks/tune.yml", self.inventory("hygiene", [REF], common={"stacktune_gate": False})
        )
        check(run["rc"] == 0, "hygiene run failed")
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
        # no secret in any log: ansible output of every run, the on-host journal and events, the reports
        for log in self.logs:
            with open(log) as handle:
                check(SECRET not in handle.read(), "secret in %s" % log)
        for base, _dirs, files in os.walk(self.work):
            for name in files:
                with open(os.path.join(base, name), errors="replace") as handle:
                    check(SECRET not in handle.read(), "secret in %s" % name)
        check(
            SECRET not in self.sh(REF, "cat /var/lib/stacktune/events.jsonl /var/lib/stacktune/layers/*.json"),
            "secret in journal",
        )
        # no shell strings built from variables
        offenders = []
        for top in ("roles", "playbooks"):
            for base, _dirs, files in os.walk(os.path.join(REPO, top)):
                for name in files:
                    if name.endswith(".yml"):
                        text = read_file(os.path.join(base, name))
                        for block in re.findall(r"(?:ansible\.builtin\.)?(?:shell|raw):\s*(.*(?:\n\s{6,}.*)*)", text):
                            if "{{" in block:
                                offenders.append(os.path.join(top, name))
        for base, _dirs, files in os.walk(os.path.join(REPO, "plugins")):
            for name in files:
                if name.endswith(".py"):
                    text = read_file(os.path.join(base, name))
                    if re.search(r"shell\s*=\s*True|use_unsafe_shell\s*=\s*True|os\.system\(|os\.popen\(", text):
                        offenders.append(name)
        check(not offenders, "shell strings built from variables: %s" % offenders)
        print(
            "hygiene: %d managed paths root-owned with fixed modes, journal 0600, no secret logged, no shell strings"
            % len(modes.splitlines())
        )
        self.counts["hygiene_paths"] = len(modes.splitlines())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--podman", default=shutil.which("podman") or "/usr/bin/podman")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, inventories)")
    args = parser.parse_args()
    driver = Driver([REF, BAD, MEASURE_KILL] + sorted(KILLS), args.podman, args.keep)
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
