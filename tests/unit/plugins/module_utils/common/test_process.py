"""How stacktune starts a program on a host (module_utils/common/process.py), run for real: the
program started for reading while it runs and the one run to its end share one start."""

import os
import signal
import sys

from ansible_collections.stacktune.gpu.plugins.module_utils.common import process

SHOW = (
    "import os, sys; print(os.getsid(0), os.getpgid(0), os.getppid()); "
    "print(repr(sys.stdin.read())); print(os.environ.get('STACKTUNE_PROBE')); sys.stderr.write('err')"
)


def test_a_program_started_in_session_leads_its_own_session_with_no_input(tmp_path):
    proc = process.start_in_session([sys.executable, "-c", SHOW], cwd=str(tmp_path))
    out, err = proc.communicate(timeout=30)
    lines = out.decode().splitlines()
    sid, pgid, ppid = (int(word) for word in lines[0].split())
    assert sid == pgid == proc.pid != os.getsid(0)
    assert ppid == os.getpid()
    assert lines[1:3] == ["''", "None"]
    assert err == b"err" and proc.returncode == 0


def test_a_program_started_in_session_gets_the_environment_given(tmp_path):
    proc = process.start_in_session([sys.executable, "-c", SHOW], env={"STACKTUNE_PROBE": "yes"})
    out, _err = proc.communicate(timeout=30)
    assert out.decode().split("\n")[2] == "yes"


def test_run_process_runs_through_the_same_start_and_kills_the_group_on_timeout():
    rc, out, _err, timed_out = process.run_process([sys.executable, "-c", SHOW], None, 30)
    assert (rc, timed_out) == (0, False) and out.split("\n")[1:3] == ["''", "None"]
    rc, _out, _err, timed_out = process.run_process([sys.executable, "-c", "import time; time.sleep(30)"], None, 0.5)
    assert timed_out and rc == -signal.SIGKILL
