# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Kind ``grubby_arg``: a kernel boot argument on a host whose boot entries grubby keeps.

RHEL-family hosts (RHEL 9 and later, Rocky, AlmaLinux, CentOS Stream, Fedora) boot from
Boot Loader Specification entries, one file per kernel under /boot/loader/entries, each with
an ``options`` line that is the kernel command line. ``grubby --update-kernel=ALL
--args=... / --remove-args=...`` edits the ``options`` line of every entry, and with it
/etc/kernel/cmdline (what kernel-install gives the next kernel installed) and
``GRUB_CMDLINE_LINUX`` of /etc/default/grub (what grub2-mkconfig would write). Those are
the kind's *targets*; its unit (``boot_entries``) snapshots all of them whole and puts them
back byte for byte.

Live is /proc/cmdline (reported ``pending_reboot`` until the next boot). The persisted value
is the argument's value where every target agrees; the next-boot value is the one the
default entry gives the kernel (grubenv's ``saved_entry``, else the first entry in grubby's
order), with grubenv variables such as TuneD's ``$tuned_params`` expanded. A bare flag has the
value "" (empty string).

grubby replaces an argument by removing it and appending the new ``key=value`` at the end of
the line, so it runs only for arguments that some target does not already carry with the
wanted value, and the prediction (check mode) applies the same rule. On an alternative root
(the tests' constructed trees) the root's own ``usr/sbin/grubby`` runs, as ``chroot ROOT
grubby`` would.

Refused before anything changes: an entry that is a link or no regular file, a file another
user owns, an argument that a target carries twice, an entry without one ``options`` line,
a ``GRUB_CMDLINE_LINUX`` beyond a plain quoted value, a value with spaces, quotes or
newlines. Entries whose options come from grubenv's ``$kernelopts`` (the RHEL 8 layout) are
reported unsupported.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import shlex

from ansible_collections.stacktune.gpu.plugins.module_utils.engine import fileops
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import (
    Kind,
    SpecError,
    Unsupported,
    plain_value,
    setting,
)
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.cmdline import (
    BootArgLive,
    cmdline_args,
    format_arg,
)

ENTRIES = "/boot/loader/entries"
KERNEL_CMDLINE = "/etc/kernel/cmdline"
ETC_DEFAULT_GRUB = "/etc/default/grub"
GRUBENV = "/boot/grub2/grubenv"
GRUBBY_PATHS = ("/usr/sbin/grubby", "/sbin/grubby", "/usr/bin/grubby", "/bin/grubby")

ARG_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
ARG_VALUE = re.compile(r"^[A-Za-z0-9_.,:=+/\-]*$")
ENTRY_NAME = re.compile(r"^[A-Za-z0-9_.+\-]+\.conf$")
_GRUB_LINE = re.compile(r"^GRUB_CMDLINE_LINUX=(.*)$")
_VAR = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def natural_key(name):
    """Sort key that orders version numbers as numbers (``ls -v``)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def entry_files(ctx):
    """Host paths of the boot entries, in grubby's order (newest version first)."""
    directory = fileops.check_no_links(ctx.root, ENTRIES)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [ENTRIES + "/" + n for n in sorted((n for n in names if n.endswith(".conf")), key=natural_key, reverse=True)]


def _read_owned(ctx, host_path):
    """Text of a target file, refused when it is a link, no regular file, or another user's."""
    data, st = fileops.read_regular(fileops.check_no_links(ctx.root, host_path))
    if data is None:
        return None
    if st.st_uid != os.geteuid():
        raise SpecError(
            "%s is owned by uid %d, not by %s (uid %d): another user can rewrite it, so stacktune will neither "
            "journal nor edit it; give it back to root (chown root:root) or leave boot arguments to its owner"
            % (host_path, st.st_uid, "root" if os.geteuid() == 0 else "this user", os.geteuid())
        )
    return data.decode("utf-8", "replace")


def _grub_cmdline(text, host_path):
    """``GRUB_CMDLINE_LINUX``'s words of /etc/default/grub, None when no such line; refused when
    the line is beyond a plain (quoted) value, for grubby would rewrite it anyway."""
    found = [m.group(1) for m in (_GRUB_LINE.match(line) for line in text.split("\n")) if m]
    if not found:
        return None
    if len(found) > 1:
        raise SpecError(
            "%s has %d GRUB_CMDLINE_LINUX lines: grubby rewrites every one of them to one value; keep the one the host "
            "should use" % (host_path, len(found))
        )
    rhs = found[0]
    if "$" in rhs or "`" in rhs:
        raise SpecError(
            "%s: GRUB_CMDLINE_LINUX=%s uses shell expansion, which grubby replaces by a plain value; write it out"
            % (host_path, rhs)
        )
    try:
        words = shlex.split(rhs, comments=True)
    except ValueError:
        raise SpecError("%s: GRUB_CMDLINE_LINUX=%s is not a quoted value" % (host_path, rhs)) from None
    return " ".join(words)


def _options(text, host_path):
    lines = [line for line in text.split("\n") if re.match(r"^options([ \t]|$)", line)]
    if len(lines) != 1:
        raise SpecError(
            "boot entry %s has %s: grubby edits the one options line of an entry; fix the entry first"
            % (host_path, "no options line" if not lines else "%d options lines" % len(lines))
        )
    return " ".join(lines[0][len("options") :].split())


def read_targets(ctx):
    """``{host path: command line}`` of every target: each boot entry's options, then
    /etc/kernel/cmdline and GRUB_CMDLINE_LINUX where the host has them."""
    texts = {}
    for host_path in entry_files(ctx):
        if not ENTRY_NAME.match(host_path.rsplit("/", 1)[1]):
            raise SpecError("boot entry %r has a name grubby's entries never have; move it away" % host_path)
        texts[host_path] = _read_owned(ctx, host_path)
    texts[KERNEL_CMDLINE] = _read_owned(ctx, KERNEL_CMDLINE)
    texts[ETC_DEFAULT_GRUB] = _read_owned(ctx, ETC_DEFAULT_GRUB)
    return targets_from_texts(texts)


def targets_from_texts(texts):
    """The targets of ``{host path: file text or None}`` (the files as read, or a snapshot's)."""
    targets = {}
    for host_path, text in texts.items():
        if text is None:
            continue
        if host_path == KERNEL_CMDLINE:
            targets[host_path] = " ".join(text.split())
        elif host_path == ETC_DEFAULT_GRUB:
            words = _grub_cmdline(text, host_path)
            if words is not None:
                targets[host_path] = words
        else:
            targets[host_path] = _options(text, host_path)
    return targets


def snapshot_targets(ctx, files):
    """The targets once a snapshot is put back (``restore_entries``): its files, and the
    entries that appeared since as they are now; entries gone since stay gone."""
    texts = {p: fileops.snapshot_text(f) for p, f in files.items() if allowed_file(p)}
    present = entry_files(ctx)
    for host_path in list(texts):
        if host_path.startswith(ENTRIES + "/") and host_path not in present:
            del texts[host_path]
    for host_path in present:
        if host_path not in texts:
            texts[host_path] = _read_owned(ctx, host_path)
    return targets_from_texts(texts)


def original_values(ctx, files, key):
    """The value an argument had in every target of a snapshot, refused when they differed
    (grubby --update-kernel=ALL sets one value everywhere)."""
    values = {value_in(w, key) for w in snapshot_targets(ctx, files).values()}
    if len(values) > 1:
        raise SpecError(
            "boot argument %s had different values across the boot entries before stacktune; it cannot be given up "
            "alone: restore the layer (rollback.yml), then apply it again without the argument" % key
        )
    return values.pop() if values else None


def state_text(targets):
    """The unit's text: one ``<host path>\\t<command line>`` line per target, sorted."""
    return "".join("%s\t%s\n" % (path, targets[path]) for path in sorted(targets))


def parse_state(text):
    out = {}
    for line in (text or "").splitlines():
        path, _sep, words = line.partition("\t")
        out[path] = words
    return out


def tokens_of(words, key):
    return [t for t in words.split() if t == key or t.startswith(key + "=")]


def value_in(words, key):
    found = tokens_of(words, key)
    if not found:
        return None
    name, sep, value = found[0].partition("=")
    return value if sep else ""


def grubby_edit(words, remove=(), add=()):
    """A command line as grubby edits it: each removed name's argument (``key`` or
    ``key=...``) taken out, each added one's old argument taken out and the new one appended."""
    out = words.split()
    for key in list(remove) + [a.partition("=")[0] for a in add]:
        for i, token in enumerate(out):
            if token == key or token.startswith(key + "="):
                del out[i]
                break
    return " ".join(out + list(add))


def info_args(text):
    """``{entry id: command line}`` from ``grubby --info=ALL`` (its ``args`` with ``root``,
    which grubby prints on a line of its own)."""
    out, block = {}, {}
    for line in (text or "").splitlines() + ["index=end"]:
        key, _sep, value = line.partition("=")
        if key == "index" and block:
            if "id" in block:
                root = ["root=%s" % block["root"]] if "root" in block else []
                out[block["id"]] = " ".join(root + block.get("args", "").split())
            block = {}
        block[key] = env_value(value)
    return out


def env_value(value):
    value = value.strip()
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] == '"' else value


def snapshot_files(ctx):
    """The host paths a ``boot_entries`` unit snapshots: the entries, /etc/kernel/cmdline and
    /etc/default/grub (present or not)."""
    return entry_files(ctx) + [KERNEL_CMDLINE, ETC_DEFAULT_GRUB]


def allowed_file(host_path):
    """Whether a journal record may restore this file for a ``boot_entries`` unit."""
    if host_path in (KERNEL_CMDLINE, ETC_DEFAULT_GRUB):
        return True
    directory, _sep, name = host_path.rpartition("/")
    return directory == ENTRIES and bool(ENTRY_NAME.match(name))


def grubenv(ctx):
    out = {}
    for line in (fileops.read_text(ctx.path(GRUBENV)) or "").splitlines():
        if line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def default_entry(ctx, paths):
    """The entry GRUB boots: grubenv's saved_entry (an entry's id, its file name less .conf),
    else the first one in grubby's order."""
    saved = grubenv(ctx).get("saved_entry")
    for path in paths:
        if path.rsplit("/", 1)[1][: -len(".conf")] == saved:
            return path
    return paths[0] if paths else None


class GrubbyArgKind(BootArgLive, Kind):
    name = "grubby_arg"

    def expand(self, spec, ctx):
        name = str(spec.get("key") or "")
        if not ARG_NAME.match(name):
            raise SpecError("grubby_arg key %r is not a valid boot argument name" % name)
        value = plain_value(spec, "grubby_arg %s" % name, required=False)
        if not ARG_VALUE.match(value):
            raise SpecError(
                "grubby_arg %s value %r has characters not allowed on a kernel command line (spaces, quotes, "
                "newlines and shell characters are refused)" % (name, value)
            )
        return [setting(self.name, name, value)]

    @staticmethod
    def grubby(ctx):
        """The grubby program to run: the host's, or the alternative root's own."""
        for host_path in GRUBBY_PATHS:
            if os.path.isfile(ctx.path(host_path)):
                return fileops.check_no_links(ctx.root, host_path)
        return None

    def unit(self, s, ctx):
        paths = entry_files(ctx)
        if not paths:
            raise Unsupported("no boot entries under %s: this host does not boot from BLS entries" % ENTRIES)
        targets = read_targets(ctx)
        for path in paths:
            if "$kernelopts" in targets[path].split() or "${kernelopts}" in targets[path].split():
                raise Unsupported(
                    "boot entry %s takes its options from grubenv's $kernelopts (the RHEL 8 layout), which "
                    "stacktune does not edit; set the argument with grubby --update-kernel=ALL --args=..." % path
                )
        for path, words in sorted(targets.items()):
            if len(tokens_of(words, s["key"])) > 1:
                raise SpecError(
                    "%s carries boot argument %s more than once (%s): grubby would replace only the first; keep "
                    "one" % (path, s["key"], " ".join(tokens_of(words, s["key"])))
                )
        if self.grubby(ctx) is None:
            raise Unsupported("grubby is not installed: boot arguments cannot be persisted in the boot entries")
        return {"type": "boot_entries", "path": ENTRIES, "kind": self.name}

    def persisted(self, s, unit_text):
        targets = parse_state(unit_text)
        values = {path: value_in(words, s["key"]) for path, words in targets.items()}
        distinct = set(values.values())
        if len(distinct) <= 1:
            return distinct.pop() if distinct else None
        shown = ", ".join(
            "%s: %s" % (p.rsplit("/", 1)[1], "absent" if v is None else format_arg(s["key"], v))
            for p, v in sorted(values.items())
        )
        return "differs between the boot entries (%s)" % shown

    def render_entries(self, settings, current_text, removed=None):
        """The unit's text once grubby ran for the arguments that need it; ``removed``:
        ``{name: value before stacktune (None: absent)}`` of arguments the layer gave up."""
        targets = parse_state(current_text)
        add = [
            format_arg(s["key"], s["value"])
            for s in sorted(settings, key=lambda x: x["key"])
            if any(value_in(w, s["key"]) != s["value"] for w in targets.values())
        ]
        drop = []
        for key, original in sorted((removed or {}).items()):
            if any(value_in(w, key) != original for w in targets.values()):
                if original is None:
                    drop.append(key)
                else:
                    add.append(format_arg(key, original))
        if not add and not drop:
            return current_text
        return state_text({path: grubby_edit(w, drop, add) for path, w in targets.items()})

    def grubby_argv(self, ctx, current_text, desired_text):
        """The grubby command that turns the current targets into the desired ones."""
        current, desired = parse_state(current_text), parse_state(desired_text)
        keys = set()
        for path in desired:
            keys.update(t.partition("=")[0] for t in set(desired[path].split()) ^ set(current.get(path, "").split()))
        add, drop = [], []
        some = next(iter(sorted(desired)))
        for key in sorted(keys):
            value = value_in(desired[some], key)
            if value is None:
                drop.append(key)
            else:
                add.append(format_arg(key, value))
        argv = [self.grubby(ctx), "--update-kernel=ALL"]
        if add:
            argv.append("--args=%s" % " ".join(add))
        if drop:
            argv.append("--remove-args=%s" % " ".join(drop))
        return argv

    def other_writers(self, settings, ctx):
        """grubby's own view (``grubby --info=ALL``) against the entries as read: an argument
        it shows otherwise than the files means grubby and stacktune read different entries."""
        program = self.grubby(ctx)
        if program is None or ctx.run_command is None:
            return []
        rc, out, err = ctx.run_command([program, "--info=ALL"])
        ids = [s["id"] for s in settings]
        if rc != 0:
            why = "grubby --info=ALL failed (rc=%s): %s; the boot entries were read from their files only"
            return [{"tool": "grubby", "message": why % (rc, (err or out).strip()[-200:]), "ids": ids}]
        shown = info_args(out)
        files = {p.rsplit("/", 1)[1][: -len(".conf")]: w for p, w in read_targets(ctx).items() if p.startswith(ENTRIES)}
        differ = []
        for s in settings:
            for entry_id in sorted(set(files) | set(shown)):
                ours = value_in(files[entry_id], s["key"]) if entry_id in files else "(no such entry)"
                theirs = value_in(shown[entry_id], s["key"]) if entry_id in shown else "(not listed)"
                if ours != theirs:
                    differ.append((s["id"], entry_id, ours, theirs))
        if not differ:
            return []
        sid, entry_id, ours, theirs = differ[0]
        message = (
            "grubby --info=ALL shows %s for %s in entry %s, the entry's file %s: grubby and stacktune do not read "
            "the same boot entries; check /boot/loader/entries and grubby's configuration"
            % (theirs, sid, entry_id, ours)
        )
        return [{"tool": "grubby", "message": message, "ids": sorted({d[0] for d in differ})}]

    def boot_value(self, s, ctx, pending=None):
        """The argument the default entry gives the kernel, grubenv variables expanded."""
        text = (pending or {}).get(ENTRIES)
        targets = parse_state(text) if text is not None else read_targets(ctx)
        entries = sorted(
            (p for p in targets if p.startswith(ENTRIES + "/")),
            key=lambda p: natural_key(p.rsplit("/", 1)[1]),
            reverse=True,
        )
        chosen = default_entry(ctx, entries)
        if chosen is None:
            return None
        env = grubenv(ctx)
        words = []
        for token in targets[chosen].split():
            match = _VAR.match(token)
            words.extend(env.get(match.group(1), "").split() if match else [token])
        return cmdline_args(" ".join(words)).get(s["key"]), chosen


def snapshot_entries(ctx):
    """Byte-exact snapshot of every target file (content, mode, owner, or absence)."""
    read_targets(ctx)  # refuses links, foreign owners and entries grubby cannot edit
    files = {}
    for host_path in snapshot_files(ctx):
        files[host_path] = fileops.snapshot_file(fileops.check_no_links(ctx.root, host_path))
    return files


def restore_entries(ctx, files, check_mode=False):
    """Put the target files back as snapshotted: ``(changed, notes)``.

    An entry snapshotted but gone now (its kernel was removed since) is not brought back; an
    entry that appeared since (a kernel installed since) is left as it is, and named.
    """
    changed, notes = False, []
    for host_path in sorted(files):
        snap = files[host_path]
        path = fileops.check_no_links(ctx.root, host_path)
        now = fileops.snapshot_file(path)
        if now == snap:
            continue
        if host_path.startswith(ENTRIES + "/") and not now.get("exists"):
            notes.append("%s is gone (its kernel was removed): not brought back" % host_path)
            continue
        changed = True
        if not check_mode:
            fileops.sweep_temp(os.path.dirname(path))
            fileops.restore_file(path, snap)
    for host_path in entry_files(ctx):
        if host_path not in files:
            notes.append(
                "%s appeared after the snapshot (a kernel installed since): left as it is; check its options line"
                % host_path
            )
    return changed, notes
