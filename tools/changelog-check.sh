#!/usr/bin/env bash
# The changelog as a release would build it, without writing into the tree:
# `antsibull-changelog lint` here, then `antsibull-changelog release` for galaxy.yml's version
# on a copy placed where ansible-doc finds it (.../ansible_collections/stacktune/gpu), and
# checks of what that release wrote (and, first, that CHANGELOG.md is generated from the releases): CHANGELOG.md (no .rst), a release summary of its own,
# no "Removed Features" unless an earlier release deprecated something, every plugin whose
# version_added is this version listed as new, and every fragment moved to the archive.
set -euo pipefail
venv="$(cd "${VENV:-.venv}" && pwd)"
export PATH="$venv/bin:$PATH"
antsibull-changelog lint

work="$(mktemp -d /tmp/stacktune-changelog.XXXXXX)"
trap 'rm -rf "$work"' EXIT
dest="$work/ansible_collections/stacktune/gpu"
mkdir -p "$dest"
# the files git tracks plus new ones not ignored, less those deleted in the work tree
git ls-files -z --cached --others --exclude-standard | grep -zv '^collections/' \
  | while IFS= read -r -d '' f; do if [ -e "$f" ] || [ -L "$f" ]; then printf '%s\0' "$f"; fi; done \
  | xargs -0 cp --parents -P -t "$dest/"
version="$(python -c 'import yaml; print(yaml.safe_load(open("galaxy.yml"))["version"])')"
# CHANGELOG.md is the released history, as antsibull-changelog generates it from
# changelogs/changelog.yaml (a release adds its fragments there and writes it again)
(
  cd "$dest"
  ANSIBLE_COLLECTIONS_PATH="$work" antsibull-changelog generate
)
if ! cmp -s "$dest/CHANGELOG.md" CHANGELOG.md; then
  echo "changelog: CHANGELOG.md is not what antsibull-changelog generate writes from changelogs/changelog.yaml:" >&2
  diff -u CHANGELOG.md "$dest/CHANGELOG.md" >&2 || true
  exit 1
fi
(
  cd "$dest"
  ANSIBLE_COLLECTIONS_PATH="$work" antsibull-changelog release --version "$version" --date 2000-01-01
)
python - "$dest" "$version" <<'PY'
import glob
import os
import sys

import yaml

dest, version = sys.argv[1], sys.argv[2]
problems = []
changes = yaml.safe_load(open(os.path.join(dest, "changelogs", "changelog.yaml")))
release = changes["releases"].get(version)
if release is None:
    sys.exit("the dry-run release recorded no version %s" % version)
summary = (release.get("changes") or {}).get("release_summary")
if not summary:
    problems.append("release %s has no release summary (add a fragment with release_summary)" % version)
for other, data in changes["releases"].items():
    if other != version and summary and summary == (data.get("changes") or {}).get("release_summary"):
        problems.append("release %s reuses the release summary of %s" % (version, other))
deprecated = any((d.get("changes") or {}).get("deprecated_features") for v, d in changes["releases"].items() if v != version)
if (release.get("changes") or {}).get("removed_features") and not deprecated:
    problems.append(
        "release %s lists removed_features, but no earlier release deprecated anything: "
        "removing what was never deprecated is a breaking_changes entry" % version
    )
if not os.path.exists(os.path.join(dest, "CHANGELOG.md")):
    problems.append("no CHANGELOG.md was written")
if os.path.exists(os.path.join(dest, "CHANGELOG.rst")):
    problems.append("CHANGELOG.rst was written (changelogs/config.yaml output_formats)")
left = [f for f in glob.glob(os.path.join(dest, "changelogs", "fragments", "*")) if not f.endswith(".keep")]
if left:
    problems.append("fragments left for the next release: %s" % ", ".join(os.path.basename(f) for f in left))
# new modules are recorded under "modules", other plugins under "plugins" by type, roles under "objects"
listed = {"module:%s" % m["name"] for m in release.get("modules") or []}
for kind, plugins in (release.get("plugins") or {}).items():
    listed.update("%s:%s" % (kind, p["name"]) for p in plugins)
listed.update("%s:%s" % (kind, o["name"]) for kind, objs in (release.get("objects") or {}).items() for o in objs)
cache = yaml.safe_load(open(os.path.join(dest, "changelogs", ".plugin-cache.yaml")))
for kind, plugins in cache["plugins"].items():
    for name, data in plugins.items():
        if str(data.get("version_added")) == version and "%s:%s" % (kind, name) not in listed:
            problems.append("%s %s (version_added %s) is not listed as new in %s" % (kind, name, version, version))
for kind, objs in (cache.get("objects") or {}).items():
    for name, data in objs.items():
        if str(data.get("version_added")) == version and "%s:%s" % (kind, name) not in listed:
            problems.append("%s %s (version_added %s) is not listed as new in %s" % (kind, name, version, version))
if problems:
    sys.exit("changelog dry-run:\n  " + "\n  ".join(problems))
print("changelog dry-run: release %s builds CHANGELOG.md (%d new plugins and roles listed)" % (version, len(listed)))
PY
