# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What pam_limits sets at the next login for the entries of a limits.d file stacktune owns.

pam_limits reads /etc/security/limits.conf, then every ``*.conf`` of
/etc/security/limits.d in the order of the file names. For one item and type, an entry for
the user by name outranks a group entry, which outranks the ``*`` wildcard; among entries
of the same rank the one read last wins. The wildcard and group entries do not apply to
root (limits.conf(5)), which is why stacktune's file names root on its own lines. A
two-field ``<domain> -`` line that matches stops pam_limits from setting any limit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.stacktune.gpu.plugins.module_utils.engine.dropins import ordered_files

LIMITS_CONF = "/etc/security/limits.conf"
LIMITS_DIRS = ("/etc/security/limits.d",)
# rank of a domain for the two kinds of account stacktune's files name: lower outranks higher
_RANK = {"root": {"root": 0}, "*": {"*": 4}}


def entries(text):
    """``[(domain, type, item, value)]`` of a limits file; ``(domain, '-', None, None)`` for a no-limit line."""
    out = []
    for raw in (text or "").splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split(None, 3)
        if len(fields) == 4:
            out.append((fields[0], fields[1].lower(), fields[2].lower(), fields[3].strip().lower()))
        elif len(fields) == 2 and fields[1] == "-":
            out.append((fields[0], "-", None, None))
    return out


def _files(ctx, pending):
    files = []
    if LIMITS_CONF in (pending or {}):
        files.append((LIMITS_CONF, pending[LIMITS_CONF]))
    else:
        try:
            with open(ctx.path(LIMITS_CONF)) as handle:
                files.append((LIMITS_CONF, handle.read()))
        except (IOError, OSError, UnicodeDecodeError):
            pass
    return files + ordered_files(ctx, LIMITS_DIRS, pending)


def effective(files, account, ltype, item):
    """``(value, path)`` pam_limits ends with for the account (``root`` or ``*``), or None."""
    ranks = _RANK[account]
    best = None  # (rank, value, path)
    for path, text in files:
        for domain, etype, eitem, value in entries(text):
            if domain not in ranks:
                continue
            if etype == "-" and eitem is None:
                return ("no limit (a '%s -' line)" % domain, path)
            if eitem != item or etype not in (ltype, "-"):
                continue
            rank = ranks[domain]
            if best is None or rank <= best[0]:
                best = (rank, value, path)
    return (best[1], best[2]) if best else None


def boot_value(ctx, path, content, pending=None):
    """``(value, winning file, what stacktune's file sets)`` for the first entry another file overrides.

    ``value`` is ``content`` itself when every entry of stacktune's file is what pam_limits
    applies (the engine then sees no difference); None where the file names an account
    this reader does not model (a user, a group or a uid range).
    """
    pending = dict(pending or {})
    pending.setdefault(path, content)
    files = _files(ctx, pending)
    for domain, ltype, item, value in entries(content):
        if domain not in _RANK or item is None:
            return None
        types = ("soft", "hard") if ltype == "-" else (ltype,)
        for one in types:
            got = effective(files, domain, one, item)
            if got is None or got[1] != path and got[0] != value:
                ours = "%s %s %s %s" % (domain, one, item, value)
                if got is None:
                    return (None, path, ours)
                if got[0].startswith("no limit"):
                    return (got[0], got[1], ours)
                return ("%s %s %s %s" % (domain, one, item, got[0]), got[1], ours)
    return (content, path, None)
