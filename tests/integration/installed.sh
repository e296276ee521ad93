#!/usr/bin/env bash
# The collection as an installed user runs it: build the tarball, install it with
# ansible-galaxy into a collections path of its own (offline; the ansible bundle's own
# collections stay where pip put them), and from an empty directory, as a user who is not
# root, with Ansible's default stdout callback and no ansible.cfg, run the entry points
# against this machine (local connection, become through sudo, check mode where a run would
# change the host). Every run must exit 0, name its report and give the next commands in
# their installed form (ansible-playbook stacktune.gpu.<name>), and write nothing under the
# collection path or on the host.
#
# As root (CI) it creates the user stacktune-installed with passwordless sudo for the run and
# removes both afterwards. As another user it runs as that user and needs `sudo -n` to work.
#   tests/integration/installed.sh     (make installed; part of make test)
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${VENV:-.venv}"
case "$venv" in /*) ;; *) venv="$repo/$venv" ;; esac
user=stacktune-installed
work="$(mktemp -d /tmp/stacktune-installed.XXXXXX)"
created_user=false
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  [ -n "${KEEP:-}" ] || rm -rf "$work"
  if $created_user; then
    rm -f /etc/sudoers.d/stacktune-installed
    userdel -r "$user" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

if [ "$(id -u)" -eq 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "installed: installing sudo (the non-root user becomes root through it)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq sudo >/dev/null
  fi
  if ! id "$user" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$user"
    created_user=true
  fi
  printf '%s ALL=(ALL) NOPASSWD: ALL\n' "$user" > /etc/sudoers.d/stacktune-installed
  chmod 0440 /etc/sudoers.d/stacktune-installed
  as_user() { runuser -u "$user" -- "$@"; }
  home="$(getent passwd "$user" | cut -d: -f6)"
else
  if ! sudo -n true 2>/dev/null; then
    echo "installed: SKIPPED: as $(id -un) this needs passwordless sudo (CI runs it as root, with a user of its own)"
    exit 0
  fi
  user="$(id -un)"
  as_user() { "$@"; }
  home="$HOME"
fi

mkdir -p "$work/dist" "$work/collections" "$work/run"
# outside the checkout and without its ansible.cfg, whose collections path holds the
# checkout itself (ansible-galaxy would take the collection as installed already)
galaxy() { (cd "$work" && env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH -u ANSIBLE_HOME "$venv/bin/ansible-galaxy" "$@"); }
galaxy collection build --force --output-path "$work/dist" "$repo" >/dev/null
tarball="$(ls "$work/dist"/stacktune-gpu-*.tar.gz)"
galaxy collection install --offline --no-deps --force -p "$work/collections" "$tarball" >/dev/null 2>&1
installed="$work/collections/ansible_collections/stacktune/gpu"
[ -f "$installed/MANIFEST.json" ] || { echo "installed: FAILED: $tarball did not install" >&2; exit 1; }
# the collection stays root's, as a system-wide install is; the user owns the directory it runs in
chown "$user" "$work/run"
chmod 0755 "$work"
touch "$work/before"
sleep 1

# the user's ansible-playbook: the venv's, or (where the venv's interpreter lives in a home
# the user cannot enter, as pyenv's under /root) the system Python of the same version with
# the venv's packages
ap=("$venv/bin/python" -m ansible.cli.playbook)
pythonpath=""
if ! as_user "$venv/bin/python" -c 'import ansible' >/dev/null 2>&1; then
  minor="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  system=""
  for candidate in "/usr/bin/python$minor" /usr/bin/python3; do
    if [ -x "$candidate" ] && [ "$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" = "$minor" ]; then
      system="$candidate"
      break
    fi
  done
  [ -n "$system" ] || { echo "installed: FAILED: $user cannot run $venv/bin/python and there is no system python$minor" >&2; exit 1; }
  ap=("$system" -m ansible.cli.playbook)
  pythonpath="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
fi

python_on_host=/usr/bin/python3
[ -x "$python_on_host" ] || python_on_host="$venv/bin/python"
state() {  # what check mode must leave as it was on this machine
  { sysctl -n vm.swappiness vm.dirty_ratio vm.max_map_count 2>/dev/null
    ls -la /etc/sysctl.d /etc/security/limits.d 2>/dev/null
    [ -e /etc/nccl.conf ] && sha256sum /etc/nccl.conf
    find /var/lib/stacktune -maxdepth 2 ! -name lock ! -name run.lock -printf '%p %m %U %s %T@\n' 2>/dev/null | sort
  } | sha256sum | cut -c1-16
}
host_before="$(state)"

failed=0
run() {
  local name="$1"; shift
  local log="$work/$name.log"
  # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
  if as_user env -i HOME="$home" PATH="/usr/sbin:/usr/bin:/sbin:/bin" LANG=C.UTF-8 ${pythonpath:+PYTHONPATH="$pythonpath"} \
       ANSIBLE_COLLECTIONS_PATH="$work/collections" ANSIBLE_STDOUT_CALLBACK=default ANSIBLE_FORCE_COLOR=0 \
       bash -c 'cd "$0/run" && exec "$@"' "$work" \
       "${ap[@]}" -i localhost, -c local -b -e "ansible_python_interpreter=$python_on_host" \
       "stacktune.gpu.$name" "$@" > "$log" 2>&1; then
    rc=0
  else
    rc=$?
  fi
  local why=""
  [ "$rc" -eq 0 ] || why="exit $rc"
  grep -q "DEPRECATION WARNING" "$log" && why="${why:+$why; }a deprecation warning"
  case "$name" in
    tune|facts) grep -q "$work/run/reports/" "$log" || why="${why:+$why; }no report under the working directory named" ;;
  esac
  case "$name" in
    tune) grep -q "ansible-playbook stacktune.gpu.tune" "$log" || why="${why:+$why; }no installed-form next command" ;;
  esac
  if [ -n "$why" ]; then
    echo "installed: FAILED: stacktune.gpu.$name $*: $why (log follows)"
    tail -40 "$log"
    failed=1
  else
    echo "installed: ok: ansible-playbook stacktune.gpu.$name $* (as $user, default callback, empty directory)"
  fi
}

run tune --check
run verify
run drift --check
run rollback --check
run facts

# from a directory the user cannot write (a read-only project checkout, AWX): the reports go
# to the user's state directory instead
mkdir -p "$work/readonly"
chmod 0555 "$work/readonly"
# shellcheck disable=SC2016  # $0 and $@ are the inner shell's
if as_user env -i HOME="$home" PATH="/usr/sbin:/usr/bin:/sbin:/bin" LANG=C.UTF-8 ${pythonpath:+PYTHONPATH="$pythonpath"} \
     ANSIBLE_COLLECTIONS_PATH="$work/collections" ANSIBLE_STDOUT_CALLBACK=default \
     bash -c 'cd "$0" && exec "$@"' "$work/readonly" \
     "${ap[@]}" -i localhost, -c local -b -e "ansible_python_interpreter=$python_on_host" stacktune.gpu.facts \
     > "$work/readonly.log" 2>&1 && grep -q "$home/.local/state/stacktune/reports/facts/" "$work/readonly.log"; then
  echo "installed: ok: from a read-only directory the reports go to $home/.local/state/stacktune/reports"
else
  echo "installed: FAILED: from a read-only directory (log follows)"
  tail -20 "$work/readonly.log"
  failed=1
fi

written="$(find "$installed" -newer "$work/before" -not -path '*/__pycache__*' -print | head -5)"
if [ -n "$written" ]; then
  echo "installed: FAILED: written under the installed collection: $written"
  failed=1
fi
host_after="$(state)"
if [ "$host_before" != "$host_after" ]; then
  echo "installed: FAILED: the check-mode runs changed this machine ($host_before -> $host_after)"
  failed=1
fi
[ "$failed" -eq 0 ] && echo "installed: every entry point ran as an installed user; nothing written under $installed or on the host"
exit "$failed"
