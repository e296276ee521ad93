#!/usr/bin/env bash
# The other supported ansible-core versions (requirements-cores.txt), each in its venv under
# $CORES_VENVS (tools/bootstrap.sh cores makes them): ansible-test sanity and the unit tests on
# each, then the molecule scenario `cores`, which tunes, gates and rolls back one container
# with every core's ansible-playbook in turn. The main version (.venv) runs everything else.
#   tools/test-cores.sh            sanity, unit tests, scenario
#   CORES_STEPS="unit" tools/test-cores.sh   only some of the three (sanity unit molecule)
set -euo pipefail
cores_venvs="${CORES_VENVS:-${VENV:-.venv}/cores}"
steps="${CORES_STEPS:-sanity unit molecule}"
venvs=()
while IFS= read -r major; do
  v="$cores_venvs/ansible-$major"
  [ -x "$v/bin/ansible-playbook" ] || { echo "stacktune: $v is missing; run tools/bootstrap.sh cores" >&2; exit 1; }
  venvs+=("$(cd "$v" && pwd)")
done < <(grep -E '^ansible[<>=!~ ]' requirements-cores.txt | grep -oE '>=[0-9]+' | tr -dc '0-9\n')

for v in "${venvs[@]}"; do
  core="$("$v/bin/ansible" --version | sed -n 1p | grep -oE '[0-9]+\.[0-9]+\.[0-9]+')"
  if [[ " $steps " == *" sanity "* ]]; then
    echo "== ansible-core $core: ansible-test sanity ($(date -u +%T))"
    VENV="$v" tools/sanity.sh
  fi
  if [[ " $steps " == *" unit "* ]]; then
    echo "== ansible-core $core: unit tests ($(date -u +%T))"
    PATH="$v/bin:$PATH" "$v/bin/python" -m pytest -p no:cacheprovider
  fi
done
if [[ " $steps " == *" molecule "* ]]; then
  echo "== molecule scenario cores: ${#venvs[@]} ansible-core versions ($(date -u +%T))"
  STACKTUNE_CORES="${venvs[*]}" molecule test -s cores
fi
