# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: preload
type: aggregate
short_description: Load the collection's controller plugins once per run instead of once per task
version_added: 0.2.0
author: stacktune maintainers (@stacktune)
description:
  - "Ansible runs each task of each host in a worker process that ends with the task. A worker
    that uses one of this collection's filters imports every filter file of the collection and
    the policy and gate code behind them, compiled from source, and the next worker does it
    again: about a quarter of a tune's controller CPU time. This callback imports them once in
    the controller's main process when the playbook starts; the workers inherit them."
  - "The stacktune.gpu.stacktune stdout callback does the same; enable this one where another
    stdout callback is in use (AWX/AAP job output, C(ansible.posix.json)). It prints nothing and
    changes no result."
requirements:
  - Enabled in ansible.cfg (C(callbacks_enabled = stacktune.gpu.preload)) or with
    C(ANSIBLE_CALLBACKS_ENABLED=stacktune.gpu.preload).
"""

from ansible.plugins.callback import CallbackBase
from ansible_collections.stacktune.gpu.plugins.plugin_utils._preload import preload


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "stacktune.gpu.preload"
    CALLBACK_NEEDS_ENABLED = True

    def v2_playbook_on_start(self, playbook):
        preload()
