# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Load the collection's controller plugins once, in the controller's main process.

Ansible runs every task of every host in a worker process forked from the controller and
ended after the task. A worker that templates ``stacktune.gpu.<filter>`` imports every
filter file of the collection (Ansible's Jinja plugin loader reads the whole package to find
one name) with the policy and gate code they import, compiled from source, and so does the
next worker, and the next: a tune spends about a quarter of its controller time on it. Loaded
here first, before any worker is forked, the workers find them loaded (``sys.modules`` and the
plugin loaders' caches are inherited through ``fork``).

Nothing here changes what a plugin does. A plugin that fails to load is left to fail where
it is used, with Ansible's own message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

COLLECTION = "stacktune.gpu"
# one name per plugin package: the Jinja loaders import the whole package for any name in it
JINJA_PROBES = (("filter_loader", "layer_name"), ("test_loader", "cpulist"))
ACTIONS = ("check_vars", "gate_layer", "run_lock")


def preload():
    """Import the collection's filter, test and action plugins; return the names loaded."""
    try:
        from ansible.plugins import loader
    except ImportError:  # not inside Ansible
        return []
    loaded = []
    for loader_name, name in JINJA_PROBES:
        fqcn = "%s.%s" % (COLLECTION, name)
        try:
            if getattr(loader, loader_name).get(fqcn) is not None:
                loaded.append(fqcn)
        except Exception:  # left to fail where it is used, with Ansible's message
            continue
    for name in ACTIONS:
        fqcn = "%s.%s" % (COLLECTION, name)
        try:
            if loader.action_loader.get(fqcn, class_only=True) is not None:
                loaded.append(fqcn)
        except Exception:  # as above
            continue
    return loaded
