#!/usr/bin/env bash
# Set up what `make tune` and `make test` need on a fresh Debian/Ubuntu machine.
#   tools/bootstrap.sh run   -> .venv with the runtime requirements
#   tools/bootstrap.sh test  -> the above, the test requirements, (as root) podman,
#                               runc and debootstrap for the molecule scenarios, and promtool
#                               (from Debian's prometheus package) in .venv/bin for the
#                               metrics tests
# Re-running is cheap: each step is skipped when already done.
set -euo pipefail
what="${1:-run}"
venv="${VENV:-.venv}"
python="${PYTHON:-python3}"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "stacktune: '$*' needs root; run it as root or install sudo" >&2; return 1; fi
}

apt_install() {
  local missing=()
  for pkg in "$@"; do dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || { echo "stacktune: please install: ${missing[*]}" >&2; return 1; }
  echo "stacktune: installing ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install python3-venv
  fi
  "$python" -m venv "$venv"
fi

stamp() { echo "$venv/.stamp-$1-$(cat "$2" requirements.txt | sha256sum | cut -c1-16)"; }

run_stamp="$(stamp run requirements.txt)"
if [ ! -e "$run_stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  "$venv/bin/python" -m pip install -q -r requirements.txt
  touch "$run_stamp"
fi

# promtool from Debian/Ubuntu's prometheus package, unpacked into the venv: installing the
# package would also install and start (through its init script, where there is no systemd)
# a Prometheus server, which the tests do not want.
promtool_install() {
  command -v promtool >/dev/null && return 0
  [ -x "$venv/bin/promtool" ] && return 0
  command -v apt-get >/dev/null || { echo "stacktune: please install promtool (package prometheus)" >&2; return 1; }
  local tmp
  tmp="$(mktemp -d)"
  as_root apt-get update -qq
  (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1) \
    || { rm -rf "$tmp"; echo "stacktune: apt-get download prometheus failed" >&2; return 1; }
  dpkg-deb --fsys-tarfile "$tmp"/prometheus_*.deb | tar -x -C "$tmp" ./usr/bin/promtool
  install -m 0755 "$tmp/usr/bin/promtool" "$venv/bin/promtool"
  rm -rf "$tmp"
  echo "stacktune: promtool $("$venv/bin/promtool" --version 2>&1 | head -1 | cut -d' ' -f3) in $venv/bin"
}

if [ "$what" = "test" ]; then
  test_stamp="$(stamp test requirements-test.txt)"
  if [ ! -e "$test_stamp" ]; then
    "$venv/bin/python" -m pip install -q -r requirements-test.txt
    touch "$test_stamp"
  fi
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
    || ! command -v shellcheck >/dev/null; then
    apt_install podman runc debootstrap shellcheck
  fi
  promtool_install
fi
