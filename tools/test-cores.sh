#!/usr/bin/env bash
# The other supported ansible-core versions (requirements-cores.txt), each in its venv under
# $CORES_VENVS (tools/bootstrap.sh cores makes them): ansible-test sanity (the tests that
# depend on the core) and the unit tests on each, then the molecule scenario `cores`, which tunes, gates and rolls back one container
# with every core's ansible-playbook in turn. The main version (.venv) runs everything else.
# The unit tests on each are those whose verdict can depend on the core: the test files that
# import ansible-core or a plugin that runs inside it, or run an ansible command
# (tests/unit/conftest.py, core_facing); the others test module_utils alone, which imports
# nothing from ansible-core. STACKTUNE_CORE_FACING_ONLY=0 runs every unit test on every core.
#   tools/test-cores.sh            sanity, unit tests, scenario
#   CORES_STEPS="unit" tools/test-cores.sh   only some of the three (sanity unit molecule)
set -euo pipefail
cores_venvs="${CORES_VENVS:-${VENV:-.venv}/cores}"
steps="${CORES_STEPS:-sanity unit molecule}"
# The sanity tests whose verdict depends on the ansible-core version: its module and plugin
# documentation schema (validate-modules, ansible-doc, action-plugin-docs), its module_utils
# and controller imports (import, compile), its meta/runtime.yml schema (runtime-metadata).
# The others read the files alone (pep8, shebang, boilerplate, shellcheck, yamllint, no-*...)
# or ask the same of the same code (pylint, the slowest): the main version runs them all.
# CORES_SANITY="" runs every test on every core.
sanity_tests="${CORES_SANITY-action-plugin-docs ansible-doc compile import runtime-metadata validate-modules}"
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
    args=()
    for t in $sanity_tests; do args+=(--test "$t"); done
    VENV="$v" tools/sanity.sh "${args[@]}"
  fi
  if [[ " $steps " == *" unit "* ]]; then
    echo "== ansible-core $core: unit tests that reach ansible-core ($(date -u +%T))"
    STACKTUNE_CORE_FACING_ONLY="${STACKTUNE_CORE_FACING_ONLY-1}" PATH="$v/bin:$PATH" "$v/bin/python" -m pytest -p no:cacheprovider
  fi
done
if [[ " $steps " == *" molecule "* ]]; then
  echo "== molecule scenario cores: ${#venvs[@]} ansible-core versions ($(date -u +%T))"
  STACKTUNE_CORES="${venvs[*]}" molecule test -s cores
fi
