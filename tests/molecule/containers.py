# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Start or remove a molecule scenario's containers with one podman call each.

The molecule scenarios' create and destroy playbooks (tests/molecule/playbooks/) call this
with the scenario's platforms as JSON:

    containers.py create '<platforms>'    podman run -d, one per platform
    containers.py destroy '<platforms>'   podman rm -f -t 0, all at once

A platform's keys: name, image, command, privileged, extra_opts (more podman run arguments).
Containers carry the label owner=molecule, as molecule's podman driver gives them (`molecule
reset` removes them by it). Prints one line per container; exits non-zero when podman does.
"""

import json
import os
import shlex
import subprocess
import sys


def podman():
    return os.environ.get("MOLECULE_PODMAN_EXECUTABLE") or "podman"


def create(platforms):
    for platform in platforms:
        name = platform["name"]
        argv = [podman(), "run", "-d", "--name", name, "--hostname", platform.get("hostname", name)]
        argv += ["--label", "owner=molecule"]
        if platform.get("privileged"):
            argv.append("--privileged")
        argv += [str(arg) for arg in platform.get("extra_opts") or []]
        argv.append(platform["image"])
        command = platform.get("command") or ""
        argv += shlex.split(command) if isinstance(command, str) else [str(arg) for arg in command]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        print("started %s" % name)


def destroy(platforms):
    names = [platform["name"] for platform in platforms]
    if names:
        subprocess.run([podman(), "rm", "-f", "-t", "0", "--ignore"] + names, check=True, stdout=subprocess.DEVNULL)
    for name in names:
        print("removed %s" % name)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("create", "destroy"):
        sys.stderr.write("usage: containers.py create|destroy PLATFORMS_JSON\n")
        return 2
    platforms = json.loads(argv[2])
    (create if argv[1] == "create" else destroy)(platforms)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
