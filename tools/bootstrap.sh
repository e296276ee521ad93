#!/usr/bin/env bash
# Set up what `make tune` and `make test` need on a fresh Debian/Ubuntu machine.
#   tools/bootstrap.sh run   -> .venv with the runtime requirements
#   tools/bootstrap.sh test  -> the above, the test requirements, (as root) podman,
#                               runc and debootstrap for the molecule scenarios, chromium
#                               for the HTML report's browser test, and promtool
#                               (from Debian's prometheus package) in .venv/bin for the
#                               metrics tests
#   tools/bootstrap.sh cores -> one venv per line of requirements-cores.txt under
#                               $CORES_VENVS (.venv/cores): that line's ansible bundle, the
#                               runtime requirements less their own bundle, and
#                               requirements-unit.txt (the other ansible-core versions the
#                               tests run on: make cores)
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

if [ "$what" = "cores" ]; then
  cores_venvs="${CORES_VENVS:-${VENV:-.venv}/cores}"
  mkdir -p "$cores_venvs"
  # the lowest Python a line asks for (python_version >= "X.Y"): python3 when new enough, else
  # pythonX.Y or a later one on PATH or under pyenv
  python_for() {
    local want="$1" cand
    [ -z "$want" ] && { echo "$python"; return 0; }
    for cand in "$python" $(for m in 3.14 3.13 3.12; do echo "python$m"; done) \
      $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null); do
      command -v "$cand" >/dev/null 2>&1 || [ -x "$cand" ] || continue
      "$cand" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$want'.split('.'))))" 2>/dev/null \
        && "$cand" -c 'import ensurepip, venv' 2>/dev/null && { echo "$cand"; return 0; }
    done
    return 1
  }
  # one venv per line, made side by side (mostly downloads and unpacking); each says how it ended
  pids=()
  while IFS= read -r line; do
    bundle="${line%%;*}"
    bundle="${bundle%% }"
    major="$(echo "$bundle" | grep -oE '>=[0-9]+' | head -n1 | tr -dc '0-9')"
    want="$(echo "$line" | grep -oE 'python_version *>= *"[0-9.]+"' | grep -oE '[0-9]+\.[0-9]+' || true)"
    dest="$cores_venvs/ansible-$major"
    stamp_file="$dest/.stamp-cores-$( (echo "$line"; grep -vE '^ansible[<>=!~ ]' requirements.txt; cat requirements-unit.txt) | sha256sum | cut -c1-16)"
    [ -e "$stamp_file" ] && continue
    if ! interpreter="$(python_for "$want")"; then
      echo "stacktune: $bundle needs Python $want or later for its controller; none found (python3 is $("$python" -V 2>&1)). Install one (or set PYTHON) and run again" >&2
      exit 1
    fi
    (
      set -e
      rm -rf "$dest"
      "$interpreter" -m venv "$dest"
      # --no-compile: the bundles are large and the tests import a small part of them
      "$dest/bin/python" -m pip install -q --no-compile "$bundle" \
        -r <(grep -vE '^ansible[<>=!~ ]' requirements.txt) -r requirements-unit.txt
      touch "$stamp_file"
      echo "stacktune: $dest: $("$dest/bin/ansible" --version | sed -n 1p) on $("$dest/bin/python" -V)"
    ) &
    pids+=("$!:$dest")
  done < <(grep -E '^ansible[<>=!~ ]' requirements-cores.txt)
  failed=0
  for entry in "${pids[@]}"; do
    wait "${entry%%:*}" || { echo "stacktune: making ${entry#*:} failed" >&2; failed=1; }
  done
  [ "$failed" = 0 ] || exit 1
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  if ! "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    apt_install python3-venv
  fi
  "$python" -m venv "$venv"
fi

# a stamp per step, named by the hash of the requirement files it installed
stamp() { local name="$1"; shift; echo "$venv/.stamp-$name-$(cat "$@" requirements.txt | sha256sum | cut -c1-16)"; }

run_stamp="$(stamp run requirements.txt)"
if [ ! -e "$run_stamp" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  # --no-compile: pip would compile every file of the ansible bundle (about 25 s of CPU); Python
  # compiles what a run imports, once, on first use
  "$venv/bin/python" -m pip install -q --no-compile -r requirements.txt
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
  test_stamp="$(stamp test requirements-test.txt requirements-unit.txt)"
  if [ ! -e "$test_stamp" ]; then
    "$venv/bin/python" -m pip install -q --no-compile -r requirements-test.txt
    touch "$test_stamp"
  fi
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null \
    || ! command -v shellcheck >/dev/null; then
    apt_install podman runc debootstrap shellcheck
  fi
  # the HTML report is rendered in a headless browser by the unit tests (test_report_browser.py)
  if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
    apt_install chromium || echo "stacktune: no chromium package here; the HTML report's browser test is skipped" >&2
  fi
  promtool_install
fi
