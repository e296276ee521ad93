# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run ansible-playbook with the Makefile's ARGS, split as a shell would, except that JSON after
-e/--extra-vars stays whole even unquoted.

``make tune ARGS='-e {"stacktune_layers": ["memory"]}'`` reaches ansible-playbook as ``-e`` and
the whole JSON (a shell splits it at its spaces, and ansible-playbook printed its usage twice);
quoted forms (``ARGS="-e '{...}' --check"``) and ``-e @vars.yml`` work as they always did.

Usage (the Makefile's targets): ARGS='...' python3 tools/playbook.py PLAYBOOK
"""

import os
import shlex
import sys

EXTRA_VARS = ("-e", "--extra-vars")
OPEN = {"{": "}", "[": "]"}


def _json_end(text, start):
    """The index after the bracket that closes the one at ``start`` (strings skipped), or None."""
    depth, i, quote = [], start, None
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = None
        elif c == '"':
            quote = c
        elif c in OPEN:
            depth.append(OPEN[c])
        elif depth and c == depth[-1]:
            depth.pop()
            if not depth:
                return i + 1
        i += 1
    return None


def split_args(text):
    """``text`` split into arguments: shell words, with an unquoted JSON value of -e kept whole."""
    out, rest = [], text or ""
    while rest.strip():
        rest = rest.lstrip()
        if out and out[-1] in EXTRA_VARS and rest[0] in OPEN:
            end = _json_end(rest, 0)
            if end is not None:
                out.append(rest[:end])
                rest = rest[end:]
                continue
        lexer = shlex.shlex(rest, posix=True, punctuation_chars=False)
        lexer.whitespace_split = True
        word = lexer.get_token()
        if word is None:
            break
        out.append(word)
        rest = lexer.instream.read()
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: ARGS='...' %s PLAYBOOK\n" % argv[0])
        return 2
    try:
        args = split_args(os.environ.get("ARGS", ""))
    except ValueError as exc:
        sys.stderr.write("ARGS cannot be read as command-line arguments (%s): %s\n" % (exc, os.environ.get("ARGS")))
        return 2
    os.execvp("ansible-playbook", ["ansible-playbook", argv[1]] + args)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
