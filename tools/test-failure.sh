#!/usr/bin/env bash
# make test: what failed in a lane, in a few lines, printed last so that the end of a long log
# (a CI page shows only its last lines) names the step and its error.
# Usage: tools/test-failure.sh PART LOG  (PART: which part of make test, e.g. "lane A")
set -uo pipefail
part="$1"
log="$2"
plain() { sed -e 's/\x1b\[[0-9;]*m//g' -e 's/\r//g' "$log"; }
scenario="$(plain | grep -E '^== molecule scenario ' | tail -n 1)"
target="$(plain | grep -E '^make(\[[0-9]+\])?: \*\*\* ' | tail -n 1)"
echo "stacktune: make test: $part failed: ${target:-(make named no target)}"
[ -z "$scenario" ] || echo "  the last scenario it began: ${scenario#== }"
plain | grep -E 'fatal: |FAILED|failed=[1-9]|Traceback|Error|error:|assert|"msg":|: not ok|^E ' \
  | grep -vE 'ignore_errors|errors=0|failed=0' | tail -n 8 | cut -c1-140 | sed 's/^/  | /'
