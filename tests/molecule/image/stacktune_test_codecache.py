# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Test image only: the compiled code of Python files imported from zip archives, kept on disk.

Every module call of the molecule scenarios runs an AnsiballZ payload, a zip archive whose
sources Python compiles again each time (zipimport keeps no bytecode): about half of a module
call's CPU time in the test containers, thousands of times per `make test`. The image built by
tests/molecule/build-image.sh loads this file at Python's start (a .pth file), and it keeps each
compiled file under /var/cache/stacktune-test-code, keyed by the hash of its source, with the
file name of the archive it came from this time. The code Python runs is what compiling the
same source gives; a host that stacktune tunes has none of this.
"""

import hashlib
import marshal
import os
import zipimport

import _imp

CACHE = "/var/cache/stacktune-test-code"
_COMPILE = zipimport._compile_source


def _compile_source(pathname, source):
    key = hashlib.sha256(source if isinstance(source, bytes) else source.encode("utf-8", "surrogatepass"))
    path = os.path.join(CACHE, key.hexdigest())
    try:
        with open(path, "rb") as handle:
            code = marshal.loads(handle.read())
    except (OSError, ValueError, EOFError, TypeError):
        code = None
    if code is not None:
        _imp._fix_co_filename(code, pathname)
        return code
    code = _COMPILE(pathname, source)
    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        part = "%s.%d.part" % (path, os.getpid())
        with open(part, "wb") as handle:
            handle.write(marshal.dumps(code))
        os.replace(part, path)
    except OSError:  # a user who cannot write the cache compiles as Python does
        pass
    return code


zipimport._compile_source = _compile_source
