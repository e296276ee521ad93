"""Test-only connection ``podman``: containers.podman.podman with module pipelining.

The molecule scenarios and the safety driver make thousands of module calls against
podman containers. The upstream plugin copies each module into the container and runs
it with five ``podman`` calls; with pipelining one ``podman exec -i`` does it, which
halves the scenarios' run time. Molecule's podman driver names the connection
``podman``, so this file takes that short name when its directory is on
ANSIBLE_CONNECTION_PLUGINS (.config/molecule/config.yml sets it for every scenario,
and the safety driver for its runs). Outside the tests nothing
loads it.

Where podman runs the container with runc (tests/molecule/containers.conf) as root, a command
enters it through ``runc exec`` instead: the same runtime, the container's own process settings
(capabilities, seccomp, cgroup, environment, working directory, a session of its own), without
podman's and conmon's start-up: about 100 ms less CPU per module call, on thousands of calls.
The container's id is kept per name in a file, and checked against runc's state directory at
every call (a container made again under the same name has another id). A remote user, a working
directory or extra environment variables, another runtime or a rootless podman: podman exec.
"""

import json
import os
import shlex
import shutil
import subprocess
import tempfile

from ansible.module_utils.common.text.converters import to_native
from ansible.plugins.connection import ConnectionBase
from ansible_collections.containers.podman.plugins.connection.podman import Connection as PodmanConnection

DOCUMENTATION = """
name: podman
short_description: Run modules in stacktune's test containers with one podman call each
description:
  - The containers.podman.podman connection, with module pipelining through C(podman exec -i).
author: stacktune
options:
  remote_addr:
    description: The container to run in.
    default: inventory_hostname
    vars:
      - name: ansible_host
      - name: inventory_hostname
  remote_user:
    description: The user inside the container (default the image's).
    vars:
      - name: ansible_user
  podman_extra_args:
    description: Extra arguments for every podman call.
    default: ''
    vars:
      - name: ansible_podman_extra_args
  podman_executable:
    description: The podman program.
    default: podman
    vars:
      - name: ansible_podman_executable
  # the options containers.podman 1.20 (the ansible 13 bundle) reads; older ones ignore them
  container_timeout:
    description: Seconds a podman call may take (0 - no limit).
    default: 0
    type: int
  mount_detection:
    description: Copy files through the container's mount point (off - podman cp).
    default: false
    type: bool
  ignore_mount_errors:
    description: Go on without the mount point when mounting fails.
    default: true
    type: bool
  extra_env_vars:
    description: Environment variables for every podman exec.
    default: {}
    type: dict
  privilege_escalation_method:
    description: How become runs a command in the container.
    default: auto
    choices: [auto, sudo, su, none]
    type: str
  working_directory:
    description: The working directory of every podman exec.
    type: str
"""

# runc's state directory for containers that podman runs as root
RUNC_ROOT = "/run/runc"


def runc_running(container):
    """Whether runc's state for this id is of a process that runs now: the state directory
    outlives a container whose processes were killed from outside podman (a machine stopped
    with its containers), and runc exec fails there, so the check is runc's own: the init
    process's pid is alive with the start time runc recorded."""
    try:
        with open(os.path.join(RUNC_ROOT, container, "state.json")) as handle:
            state = json.load(handle)
        pid, start = int(state["init_process_pid"]), int(state["init_process_start"])
        with open("/proc/%d/stat" % pid) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return False
    # /proc/PID/stat: field 22 is the start time; fields[0] is field 3
    return len(fields) > 19 and fields[19] == str(start)


class Connection(PodmanConnection):
    transport = "podman"
    has_pipelining = True

    def is_pipelining_enabled(self, wrap_async=False):
        # async tasks need the module file on the container; everything else is piped
        return not wrap_async

    def _connect(self):
        # containers.podman before 1.20 mounts the container's filesystem at every connection,
        # that is for every task: one more podman call per module. Files are copied with
        # `podman cp` instead, one podman call per file either way.
        if not self._connected:
            ConnectionBase._connect(self)
            self._mount_point = None
            self._connected = True
        return self

    def _runc_id(self):
        """The container's id where runc runs it as root here, else None (podman exec then)."""
        # (every option read here is declared in DOCUMENTATION above, whatever containers.podman has)
        options = ("remote_user", "working_directory", "extra_env_vars", "podman_extra_args")
        if getattr(self, "user", None) or any(self.get_option(option) for option in options):
            return None
        name = str(self._container_id)
        cache = os.path.join(tempfile.gettempdir(), "stacktune-test-runc-ids", name.replace("/", "_"))
        try:
            with open(cache) as handle:
                known = handle.read().strip()
        except OSError:
            known = ""
        if known and runc_running(known):
            return known
        podman = shutil.which(self.get_option("podman_executable"))
        if not podman:
            return None
        inspect = subprocess.run(
            [podman, "inspect", "--format", "{{.Id}} {{.OCIRuntime}}", name],
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
        )
        found = to_native(inspect.stdout).split()
        if inspect.returncode != 0 or len(found) != 2 or found[1] != "runc":
            return None
        if not runc_running(found[0]):
            return None
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        part = "%s.%d" % (cache, os.getpid())
        with open(part, "w") as handle:
            handle.write(found[0])
        os.replace(part, cache)
        return found[0]

    def exec_command(self, cmd, in_data=None, sudoable=False):
        if not self._connected:
            self._connect()
        runc = shutil.which("runc")
        container = self._runc_id() if runc else None
        if container:
            ConnectionBase.exec_command(self, cmd, in_data=in_data, sudoable=sudoable)
            argv = [runc, "--root", RUNC_ROOT, "exec", container]
            argv += shlex.split(to_native(cmd, errors="surrogate_or_strict"))
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            stdout, stderr = process.communicate(input=in_data)
            return process.returncode, stdout, stderr
        # containers.podman 1.20 and later pipe in_data through podman exec -i themselves
        if in_data is None or not hasattr(self, "_podman"):
            return super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if not self._connected:
            self._connect()
        args = ["exec", "-i"]
        # older containers.podman keep the user in self.user, newer ones (1.20) only as the option
        user = getattr(self, "user", None) or self.get_option("remote_user")
        if user:
            args.extend(("--user", user))
        return self._podman(args, shlex.split(to_native(cmd, errors="surrogate_or_strict")), in_data)
