"""Where the controller-side reports go: reports/ in the directory ansible-playbook runs from,
or the XDG state directory where that cannot be written (a read-only project directory)."""

import os

import pytest

from ansible.errors import AnsibleLookupError

from ansible_collections.stacktune.gpu.plugins.lookup import report_dir as plugin


def test_reports_go_under_the_working_directory_when_it_is_writable(tmp_path):
    assert plugin.report_dir({"PWD": str(tmp_path), "HOME": "/nonexistent"}) == str(tmp_path / "reports")
    (tmp_path / "reports").mkdir()
    assert plugin.report_dir({"PWD": str(tmp_path)}) == str(tmp_path / "reports")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere; the read-only case needs another user")
def test_a_read_only_working_directory_sends_them_to_the_state_directory(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    project.chmod(0o555)
    try:
        got = plugin.report_dir({"PWD": str(project), "XDG_STATE_HOME": str(tmp_path / "state")})
    finally:
        project.chmod(0o755)
    assert got == str(tmp_path / "state" / "stacktune" / "reports")


def test_the_state_directory_defaults_under_home(tmp_path, monkeypatch):
    monkeypatch.setattr(plugin, "writable_dir", lambda path: False)
    assert plugin.report_dir({"PWD": "/srv/project", "HOME": str(tmp_path)}) == str(
        tmp_path / ".local" / "state" / "stacktune" / "reports"
    )


def test_a_path_that_cannot_be_created_is_not_writable(tmp_path):
    afile = tmp_path / "file"
    afile.write_text("x")
    assert plugin.writable_dir(str(afile / "reports")) is False
    assert plugin.writable_dir(str(tmp_path / "a" / "b" / "reports")) is True


def test_sub_directories_are_names_only(tmp_path, monkeypatch):
    monkeypatch.setenv("PWD", str(tmp_path))
    lookup = plugin.LookupModule()
    assert lookup.run(["facts"]) == [str(tmp_path / "reports" / "facts")]
    with pytest.raises(AnsibleLookupError, match="no sub-directory of .*path separator"):
        lookup.run(["../etc"])
