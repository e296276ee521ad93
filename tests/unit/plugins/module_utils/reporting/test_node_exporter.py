# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where node_exporter reads: a /proc and an /etc built in a temporary directory, and a real
process on this machine whose command line is a node_exporter's."""

from __future__ import absolute_import, division, print_function

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.stacktune.gpu.plugins.module_utils.reporting import node_exporter as ne

DEBIAN_ARGS_DEFAULT = """# Set the command-line arguments to pass to the server.
# Due to shell escaping, to pass backslashes for regexes, you need to double
# them (\\\\d for \\d). If running under systemd, you need to double them again
ARGS=""
"""


class Host(object):
    """A /proc with processes (cmdline, comm, root) and the /etc files the lookup reads."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.proc = tmp_path / "proc"
        (self.proc / "self").mkdir(parents=True)
        os.symlink("/", str(self.proc / "self" / "root"))
        self.defaults = tmp_path / "etc" / "default" / "prometheus-node-exporter"
        self.os_release = tmp_path / "etc" / "os-release"
        self.defaults.parent.mkdir(parents=True)

    def process(self, pid, argv, comm=None, root="/"):
        base = self.proc / str(pid)
        base.mkdir()
        (base / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (base / "comm").write_text((comm or os.path.basename(argv[0]))[:15] + "\n")
        os.symlink(str(root), str(base / "root"))

    def locate(self):
        return ne.locate(proc_root=str(self.proc), defaults_file=str(self.defaults), os_release=str(self.os_release))


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--collector.textfile.directory=/run/prometheus"], (True, "/run/prometheus")),
        (["--web.listen-address=:9100", "--collector.textfile.directory", "/srv/tf"], (True, "/srv/tf")),
        (["-collector.textfile.directory=/old/style"], (True, "/old/style")),
        (["--collector.textfile.directory=/a", "--collector.textfile.directory=/b"], (True, "/b")),
        (["--collector.textfile.directory="], (True, "")),
        (["--collector.textfile"], (False, None)),
        (["--", "--collector.textfile.directory=/after/dashdash"], (False, None)),
        (["--collector.textfile.directory"], (False, None)),
        ([], (False, None)),
    ],
)
def test_textfile_flag_forms(argv, expected):
    assert ne.textfile_flag(argv) == expected


def test_a_running_node_exporter_names_the_directory(host):
    host.process(1, ["/sbin/init"])
    host.process(812, ["/usr/local/bin/node_exporter", "--collector.textfile.directory", "/run/prometheus"])
    host.os_release.write_text("ID=ubuntu\nID_LIKE=debian\n")
    found = host.locate()
    assert (found["path"], found["source"]) == ("/run/prometheus", "process")
    assert found["detail"] == "node_exporter (pid 812) --collector.textfile.directory=/run/prometheus"
    assert found["warnings"] == []


def test_debian_package_binary_without_the_flag_reads_its_builtin_default(host):
    host.process(900, ["/usr/bin/prometheus-node-exporter", "--web.listen-address=:9100"])
    found = host.locate()
    assert (found["path"], found["source"]) == ("/var/lib/prometheus/node-exporter", "package_default")


def test_process_found_by_comm_when_argv0_is_something_else(host):
    host.process(77, ["exporter", "--collector.textfile.directory=/x/tf"], comm="prometheus-node-exporter")
    assert host.locate()["path"] == "/x/tf"


def test_upstream_node_exporter_without_the_flag_reads_nothing_and_the_next_source_decides(host):
    host.process(50, ["node_exporter"])
    host.defaults.write_text('ARGS="--collector.textfile.directory=/srv/textfile --web.listen-address=:9100"\n')
    found = host.locate()
    assert (found["path"], found["source"]) == ("/srv/textfile", "defaults_file")
    assert (
        len(found["warnings"]) == 1
        and "node_exporter (pid 50) has no --collector.textfile.directory" in (found["warnings"][0])
    )


def test_a_node_exporter_in_a_container_is_skipped(host, tmp_path):
    host.process(60, ["/bin/node_exporter", "--collector.textfile.directory=/textfile"], root=tmp_path)
    host.os_release.write_text('ID="rocky"\nID_LIKE="rhel centos fedora"\n')
    found = host.locate()
    assert (found["path"], found["source"]) == (ne.FALLBACK_DIR, "fallback")
    assert "another root directory" in found["warnings"][0] and "stacktune_metrics_dir" in found["warnings"][0]


def test_two_node_exporters_reading_different_directories_the_first_wins_with_a_warning(host):
    host.process(10, ["node_exporter", "--collector.textfile.directory=/first"])
    host.process(11, ["node_exporter", "--collector.textfile.directory=/second"])
    found = host.locate()
    assert found["path"] == "/first"
    assert found["warnings"] == ["node_exporter (pid 11) reads /second too; writing to /first only"]


def test_programs_that_only_mention_node_exporter_are_not_it(host):
    host.process(20, ["python3", "node_exporter", "--collector.textfile.directory=/nope"])
    host.process(21, ["grep", "prometheus-node-exporter"])
    host.os_release.write_text("ID=debian\n")
    assert host.locate()["source"] == "distribution"


@pytest.mark.parametrize(
    "text, expected",
    [
        (DEBIAN_ARGS_DEFAULT, []),
        ("ARGS='--collector.textfile.directory /srv/a'\n", ["--collector.textfile.directory", "/srv/a"]),
        ('ARGS="--a"\n# ARGS="--b"\nARGS="--c" # last wins\n', ["--c"]),
        ('ARGS="$EXTRA --collector.textfile.directory=/x"\n', None),
        ("ARGS=--a --b\n", None),
        ("OTHER=1\n", None),
        ("", None),
    ],
)
def test_defaults_file_args(text, expected):
    assert ne.defaults_file_args(text) == expected


def test_the_package_defaults_file_as_shipped_leaves_it_to_the_distribution(host):
    host.defaults.write_text(DEBIAN_ARGS_DEFAULT)
    host.os_release.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n')
    found = host.locate()
    assert (found["path"], found["source"]) == ("/var/lib/prometheus/node-exporter", "distribution")


def test_nothing_known_is_the_fallback(host):
    found = host.locate()
    assert (found["path"], found["source"], found["warnings"]) == (ne.FALLBACK_DIR, "fallback", [])


def test_problem_refuses_what_cannot_take_the_file(tmp_path):
    assert ne.problem(str(tmp_path / "new"), "configured", ("stacktune.prom",)) is None
    assert "absolute path" in ne.problem("var/lib", "configured")
    assert "absolute path" in ne.problem("/var/../etc", "configured")
    os.symlink(str(tmp_path), str(tmp_path / "link"))
    message = ne.problem(str(tmp_path / "link"), "process")
    assert message.startswith("stacktune_metrics_dir (auto, found by process): ")
    assert "is a symbolic link (to %s)" % tmp_path in message
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "stacktune.prom").mkdir()
    assert "is not a regular file" in ne.problem(str(tmp_path / "d"), "configured", ("stacktune.prom",))


def test_resolve_gives_a_configured_directory_or_refuses_it(tmp_path):
    assert ne.resolve(str(tmp_path) + "/tf/")["path"] == str(tmp_path / "tf")
    with pytest.raises(ValueError, match=r"^stacktune_metrics_dir \(configured\) must be an absolute path"):
        ne.resolve("relative")


def test_a_real_node_exporter_process_on_this_machine_is_found(tmp_path):
    """A program started as node_exporter with the flag: its /proc entry is what the lookup reads."""
    program = tmp_path / "node_exporter"
    os.symlink(sys.executable, str(program))
    directory = str(tmp_path / "textfile")
    child = subprocess.Popen(
        [str(program), "-c", "import time; time.sleep(60)", "--collector.textfile.directory", directory]
    )
    try:
        deadline = time.time() + 10
        while True:
            ours = [p for p in ne.processes() if p[0] == child.pid]
            if ours and ours[0][2] or time.time() > deadline:
                break
            time.sleep(0.05)
        assert ours, "the child's /proc entry was not recognised as a node_exporter"
        pid, name, argv, same_root = ours[0]
        assert (name, same_root) == ("node_exporter", True)
        assert ne.textfile_flag(argv) == (True, directory)
        others = [p for p in ne.processes() if p[0] != child.pid]
        if not others:
            found = ne.resolve("auto", files=("stacktune.prom",))
            assert (found["path"], found["source"]) == (directory, "process")
    finally:
        child.kill()
        child.wait()
