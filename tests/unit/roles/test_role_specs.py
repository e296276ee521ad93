# Copyright: stacktune contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every role documents exactly the variables it defaults, for every entry point.

For each roles/<role>/ with both defaults/main.yml and meta/argument_specs.yml: every
variable in defaults is an option of every entry point and every option has a default
in defaults/main.yml (an unset one as null), with a description,
a type, and a documented default equal to the real one.
"""

import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES_DIR = os.path.join(ROOT, "roles")


def _roles():
    if not os.path.isdir(ROLES_DIR):
        return []
    out = []
    for name in sorted(os.listdir(ROLES_DIR)):
        base = os.path.join(ROLES_DIR, name)
        if os.path.isfile(os.path.join(base, "defaults", "main.yml")) and os.path.isfile(
            os.path.join(base, "meta", "argument_specs.yml")
        ):
            out.append(name)
    return out


def _load(role, *parts):
    with open(os.path.join(ROLES_DIR, role, *parts)) as handle:
        return yaml.safe_load(handle)


def _entry_points(role):
    specs = _load(role, "meta", "argument_specs.yml")
    assert isinstance(specs, dict) and isinstance(specs.get("argument_specs"), dict), (
        "%s: meta/argument_specs.yml needs a top-level argument_specs mapping" % role
    )
    return specs["argument_specs"]


ROLES = _roles()


def test_roles_found():
    # The collection ships layer roles; an empty list means the test looked in the wrong place.
    assert ROLES, "no role with defaults/main.yml and meta/argument_specs.yml under %s" % ROLES_DIR


@pytest.mark.parametrize("role", ROLES)
def test_main_entry_point_exists(role):
    assert "main" in _entry_points(role), "%s: argument_specs has no main entry point" % role


# Entry points that read only a few of the role's variables and check only those: a wrong
# tuning variable must not stop the recovery path (verify, drift, rollback).
NARROW_ENTRY_POINTS = {("stacktune", "verify"), ("stacktune", "drift"), ("stacktune", "rollback")}


@pytest.mark.parametrize("role", ROLES)
def test_every_default_is_documented_in_every_entry_point(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    for entry, spec in _entry_points(role).items():
        if (role, entry) in NARROW_ENTRY_POINTS:
            options = (spec or {}).get("options") or {}
            assert set(options) <= set(defaults), "%s: %s documents what it does not default" % (role, entry)
            continue
        options = (spec or {}).get("options") or {}
        missing = sorted(set(defaults) - set(options))
        assert not missing, "%s: entry point %s does not describe %s" % (role, entry, ", ".join(missing))


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_default(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    for entry, spec in _entry_points(role).items():
        options = (spec or {}).get("options") or {}
        # a required option has no default: the caller always passes it
        extra = sorted(n for n in set(options) - set(defaults) if not (options[n] or {}).get("required"))
        assert not extra, "%s: entry point %s documents %s, absent from defaults/main.yml" % (
            role,
            entry,
            ", ".join(extra),
        )


@pytest.mark.parametrize("role", ROLES)
def test_options_are_typed_described_and_defaults_agree(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    for entry, spec in _entry_points(role).items():
        for name, option in ((spec or {}).get("options") or {}).items():
            where = "%s: entry point %s option %s" % (role, entry, name)
            assert option.get("type"), "%s has no type" % where
            assert option.get("description"), "%s has no description" % where
            if name not in defaults:
                continue
            documented = option.get("default")
            actual = defaults[name]
            if isinstance(actual, str) and "{{" in actual:
                continue  # a templated default is documented in words
            assert documented == actual, "%s documents default %r, defaults/main.yml has %r" % (
                where,
                documented,
                actual,
            )
            if option.get("choices") and actual is not None:
                values = actual if option.get("type") == "list" else [actual]
                bad = [v for v in values if v not in option["choices"]]
                assert not bad, "%s default has %r, not among its choices" % (where, bad)


@pytest.mark.parametrize("role", ROLES)
def test_public_variables_carry_the_role_prefix(role):
    defaults = _load(role, "defaults", "main.yml") or {}
    wrong = sorted(n for n in defaults if not n.startswith((role + "_", "stacktune_")))
    assert not wrong, "%s: variables without the %s_ prefix: %s" % (role, role, ", ".join(wrong))


def test_the_layer_list_is_the_same_wherever_it_is_written():
    # stacktune_layers (defaults, the order a run applies) is a part of the one list of the
    # layers this collection ships (vars: __stacktune_builtin_layers, what validation accepts by
    # short name), in its order; the argument spec's documented default is checked equal above.
    # The shipped layers it leaves out are opt-in. Each is a role.
    default = _load("stacktune", "defaults", "main.yml")["stacktune_layers"]
    builtin = _load("stacktune", "vars", "main.yml")["__stacktune_builtin_layers"]
    assert len(set(builtin)) == len(builtin)
    assert default == [layer for layer in builtin if layer in default]
    for layer in builtin:
        assert os.path.isfile(os.path.join(ROLES_DIR, layer, "meta", "argument_specs.yml")), layer
