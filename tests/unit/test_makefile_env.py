# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The environment the Makefile gives every command: cryptography 51's warning that
ansible-core's ssh-agent support imports DSA is hidden, and only that one (a user's own
PYTHONWARNINGS is kept, and every other warning still shows)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DSA = "DSA is deprecated and support will be removed in a future release. Use a more modern signature algorithm."
WARN = (
    "import warnings, sys\n"
    "class CryptographyDeprecationWarning(UserWarning): pass\n"
    "warnings.warn(sys.argv[1], CryptographyDeprecationWarning)\n"
)
SHOW = "show-env: ; @printf '%s' \"$$PYTHONWARNINGS\""


def make_env(extra=None):
    """PYTHONWARNINGS as the Makefile's recipes see it."""
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    env.pop("MAKEFLAGS", None)
    env.update(extra or {})
    shown = subprocess.run(
        ["make", "-s", "--no-print-directory", "-f", "Makefile", "--eval", SHOW, "show-env"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return shown.stdout


def warned(pythonwarnings, message):
    env = dict(os.environ, PYTHONWARNINGS=pythonwarnings)
    done = subprocess.run([sys.executable, "-c", WARN, message], env=env, capture_output=True, text=True, check=False)
    return done.returncode, done.stderr


def test_the_dsa_warning_is_hidden_and_no_other():
    value = make_env()
    assert value == "ignore:DSA is deprecated"
    assert warned(value, DSA) == (0, "")
    rc, err = warned(value, "something else is deprecated")
    assert rc == 0 and "something else is deprecated" in err


def test_a_users_own_pythonwarnings_is_kept():
    value = make_env({"PYTHONWARNINGS": "error"})
    assert value == "error,ignore:DSA is deprecated"
    assert warned(value, DSA) == (0, "")
    rc, err = warned(value, "something else is deprecated")
    assert rc == 1 and "CryptographyDeprecationWarning: something else is deprecated" in err
