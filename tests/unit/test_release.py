# -*- coding: utf-8 -*-
# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a release states about itself is true: no plugin or option was added in a version
after the one galaxy.yml builds, and every collection galaxy.yml depends on is used."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ast
import os
import re
import shutil
import subprocess
import tarfile

import pytest
import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
with open(os.path.join(REPO, "galaxy.yml")) as _handle:
    GALAXY = yaml.safe_load(_handle)


def version(text):
    return tuple(int(p) for p in str(text).split("."))


def _documented():
    """(file, DOCUMENTATION as data) of every plugin: modules, action, callback, filter, test."""
    plugins = os.path.join(REPO, "plugins")
    for kind in sorted(os.listdir(plugins)):
        folder = os.path.join(plugins, kind)
        if kind in ("module_utils", "plugin_utils", "doc_fragments") or not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.endswith(".py"):
                with open(path) as handle:
                    tree = ast.parse(handle.read())
                for node in tree.body:
                    if (
                        isinstance(node, ast.Assign)
                        and isinstance(node.targets[0], ast.Name)
                        and node.targets[0].id == "DOCUMENTATION"
                    ):
                        yield os.path.relpath(path, REPO), yaml.safe_load(node.value.value)
            elif name.endswith(".yml"):
                with open(path) as handle:
                    yield os.path.relpath(path, REPO), yaml.safe_load(handle)["DOCUMENTATION"]


def _versions_added(doc, where=""):
    """Every version_added in a plugin's documentation, with where it is."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "version_added":
                yield where or "the plugin", value
            else:
                yield from _versions_added(value, "%s.%s" % (where, key) if where else key)
    elif isinstance(doc, list):
        for item in doc:
            yield from _versions_added(item, where)


DOCUMENTED = list(_documented())


def test_every_kind_of_plugin_is_read():
    kinds = {path.split(os.sep)[1] for path, _doc in DOCUMENTED}
    assert {"modules", "callback", "filter", "test"} <= kinds, kinds


@pytest.mark.parametrize("path, doc", DOCUMENTED, ids=[p for p, _d in DOCUMENTED])
def test_no_version_added_is_ahead_of_galaxy_yml(path, doc):
    assert doc.get("version_added"), "%s has no version_added" % path
    for where, added in _versions_added(doc):
        assert version(added) <= version(GALAXY["version"]), "%s: %s has version_added %s, galaxy.yml builds %s" % (
            path,
            where,
            added,
            GALAXY["version"],
        )


def _sources():
    for top in ("roles", "playbooks", "plugins", "meta"):
        for base, _dirs, files in os.walk(os.path.join(REPO, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".py", ".j2")):
                    with open(os.path.join(base, name)) as handle:
                        yield handle.read()
    with open(os.path.join(REPO, "tune.yml")) as handle:
        yield handle.read()


@pytest.mark.parametrize("dependency", sorted(GALAXY.get("dependencies") or {}))
def test_every_dependency_is_used_by_the_collection(dependency):
    used = re.compile(r"\b%s\.[a-z_]+" % re.escape(dependency))
    assert any(used.search(text) for text in _sources()), (
        "galaxy.yml depends on %s, but no role, playbook or plugin uses it" % dependency
    )


def test_the_galaxy_requirements_name_the_dependencies():
    with open(os.path.join(REPO, "collections", "requirements.yml")) as handle:
        listed = {c["name"] for c in yaml.safe_load(handle)["collections"]}
    assert listed == set(GALAXY.get("dependencies") or {})


with open(os.path.join(REPO, "execution-environment.yml")) as _handle:
    EE = yaml.safe_load(_handle)


def test_the_execution_environment_runs_the_ansible_core_the_collection_requires():
    with open(os.path.join(REPO, "meta", "runtime.yml")) as handle:
        required = yaml.safe_load(handle)["requires_ansible"]
    lowest = re.match(r"^>=\s*([0-9.]+)$", required).group(1)
    spec = EE["dependencies"]["ansible_core"]["package_pip"]
    found = re.match(r"^ansible-core>=([0-9.]+),<([0-9.]+)$", spec)
    assert found, spec
    assert version(found.group(1)) == version(lowest)[: len(version(found.group(1)))], (spec, required)
    assert version(found.group(2)) > version(lowest), (spec, required)


def test_the_execution_environment_takes_the_collections_from_galaxy_yml_only():
    """No list of collections of its own: installing the tarball brings galaxy.yml's dependencies."""
    assert "galaxy" not in EE["dependencies"], EE["dependencies"]["galaxy"]
    step = [s for s in EE["additional_build_steps"]["append_final"] if s.startswith("RUN ")][0]
    assert 'ansible-galaxy collection install "$1"' in step and "--offline" not in step, step


def test_the_execution_environment_installs_controller_needs_only():
    with open(os.path.join(REPO, EE["dependencies"]["system"])) as handle:
        packages = {line.split()[0] for line in handle if line.strip() and not line.startswith("#")}
    assert packages <= {"openssh-clients", "openssh-client"}, packages
    assert "fedora" not in EE["images"]["base_image"]["name"]


def _install_step(tmp_path):
    """The image's install step as a shell script run here: the tarball folder is tmp_path and
    ansible-galaxy is replaced by echo."""
    step = [s for s in EE["additional_build_steps"]["append_final"] if s.startswith("RUN ")][0][4:]
    return step.replace("/tmp/stacktune", str(tmp_path)).replace("ansible-galaxy collection install", "echo installs")


@pytest.mark.parametrize(
    "tarballs, installs",
    [
        ([], False),
        (["stacktune-gpu-0.2.0.tar.gz"], True),
        (["stacktune-gpu-0.1.0.tar.gz", "stacktune-gpu-0.2.0.tar.gz"], False),
    ],
)
def test_the_image_build_fails_without_exactly_one_collection_tarball(tmp_path, tarballs, installs):
    for name in tarballs:
        (tmp_path / name).write_bytes(b"")
    run = subprocess.run(["sh", "-c", _install_step(tmp_path)], check=False, capture_output=True, text=True)
    assert (run.returncode == 0) is installs, run.stderr
    if installs:
        assert run.stdout.startswith("installs %s/%s " % (tmp_path, tarballs[0]))
    else:
        assert "want exactly one collection tarball in dist/" in run.stderr


# What an installed collection runs and documents; anything else at the top of the tarball is a
# developer's file that build_ignore should keep out.
TARBALL_TOP = {
    "FILES.json",
    "MANIFEST.json",
    "LICENSE",
    "README.md",
    "CHANGELOG.md",
    "bindep.txt",
    "requirements-ee.txt",
    "changelogs",
    "docs",
    "meta",
    "playbooks",
    "plugins",
    "roles",
}


@pytest.fixture(scope="module")
def tarball_files(tmp_path_factory):
    """Every entry of the built tarball: its size, None for a directory."""
    galaxy = shutil.which("ansible-galaxy")
    if galaxy is None:
        pytest.skip("ansible-galaxy is not on PATH")
    out = tmp_path_factory.mktemp("build")
    subprocess.run(
        [galaxy, "collection", "build", "--output-path", str(out), REPO], check=True, capture_output=True, text=True
    )
    path = out / ("stacktune-gpu-%s.tar.gz" % GALAXY["version"])
    with tarfile.open(str(path)) as archive:
        return {m.name: (m.size if m.isfile() else None) for m in archive.getmembers()}


@pytest.fixture(scope="module")
def tarball(tarball_files):
    return sorted(tarball_files)


def test_the_tarball_holds_what_an_installed_user_runs_and_no_developer_tools(tarball):
    top = {name.split("/")[0] for name in tarball}
    assert top <= TARBALL_TOP, sorted(top - TARBALL_TOP)
    assert {"LICENSE", "README.md", "meta", "playbooks", "plugins", "roles"} <= top
    for needed in (
        "meta/runtime.yml",
        "meta/execution-environment.yml",
        "playbooks/tune.yml",
        "playbooks/verify.yml",
        "playbooks/rollback.yml",
        "plugins/callback/stacktune.py",
        "plugins/filter/verify_table.yml",
        "roles/stacktune/tasks/rollback.yml",
        "changelogs/changelog.yaml",
    ):
        assert needed in tarball, needed
    assert not [n for n in tarball if n.startswith("changelogs/fragments")]
    assert not [n for n in tarball if "/molecule/" in n or n.endswith((".pyc", "/pytest.ini"))]


# Files an installed collection may hold that are empty by design: a package's __init__.py.
EMPTY_OK = ("__init__.py",)
LEFTOVERS = (".tmp", ".orig", ".rej", ".bak", ".swp", "~", ".pyc")


def test_every_file_in_the_tarball_is_a_tracked_file_of_the_repository(tarball_files):
    tracked = set(
        subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout.splitlines()
    )
    files = sorted(name for name, size in tarball_files.items() if size is not None)
    generated = {"FILES.json", "MANIFEST.json"}
    assert len(files) > 100, files
    stray = [name for name in files if name not in tracked and name not in generated]
    assert not stray, "the tarball holds files git does not track: %s" % stray


def test_the_tarball_holds_no_leftover_and_no_empty_file(tarball_files):
    sizes = {name: size for name, size in tarball_files.items() if size is not None}
    leftovers = [name for name in sizes if name.endswith(LEFTOVERS)]
    assert not leftovers, leftovers
    empty = [name for name, size in sizes.items() if size == 0 and not name.endswith(EMPTY_OK)]
    assert not empty, "empty files in the tarball: %s" % empty


def test_the_tarball_holds_no_developer_requirement_file(tarball):
    top = {name.split("/")[0] for name in tarball}
    assert not {n for n in top if n.startswith("requirements") and n != "requirements-ee.txt"}, sorted(top)
