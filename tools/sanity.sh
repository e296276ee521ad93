#!/usr/bin/env bash
# Run `ansible-test sanity` on a copy of the collection placed where ansible-test wants
# it (.../ansible_collections/stacktune/gpu). Works offline: ansible-test's pip bootstrap
# script is replaced by one that uses ensurepip and the configured package index.
set -euo pipefail
venv="$(cd "${VENV:-.venv}" && pwd)"
work="$(mktemp -d /tmp/stacktune-sanity.XXXXXX)"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/stacktune/gpu"
mkdir -p "$dest"
# the files git tracks plus new ones not ignored: what a release would contain
git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' | xargs -0 -I{} cp --parents -P {} "$dest/"

pyver="$("$venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
cache="$HOME/.ansible/test/cache"
pipver="$(grep -hoE "pip='[0-9.]+'" "$venv"/lib/python*/site-packages/ansible_test/_internal/python_requirements.py | head -n1 | tr -dc '0-9.')"
getpip="get_pip_${pipver//./_}.py"
if [ -n "$pipver" ] && [ ! -s "$cache/$getpip" ]; then
  mkdir -p "$cache"
  cat > "$cache/$getpip" <<'PY'
# Offline stand-in for pip's get-pip.py, used by ansible-test to bootstrap pip in its venvs.
import ensurepip
import os
import subprocess
import sys

ensurepip.bootstrap(upgrade=True)
os.environ.pop("PIP_CONFIG_FILE", None)
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
if args:
    subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
PY
fi
cd "$dest"
PATH="$venv/bin:$PATH" ansible-test sanity --local --python "$pyver" --color no "$@"
