"""A layer variable given candidates: the layer's filter puts the first in place, and with
``search=true`` hands the gate every candidate with the layer's whole settings for it."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.stacktune.gpu.plugins.filter import gpu_settings as gpu_filters
from ansible_collections.stacktune.gpu.plugins.filter import memory as memory_filters


def test_power_limit_candidates_first_in_place_and_every_one_for_the_gate():
    first = gpu_filters.gpu_settings_settings("all", power_limit_w=[700, 650], persistence_mode=True, gpu_count=1)
    assert [(s["key"], s["value"]) for s in first] == [("persistence_mode", True), ("power_limit_w", 700)]
    search = gpu_filters.gpu_settings_settings(
        "all", power_limit_w={"from": 700, "to": 600, "step": -50}, persistence_mode=True, gpu_count=1, search=True
    )
    assert search["variable"] == "gpu_settings_power_limit_watts"
    assert [c["value"] for c in search["candidates"]] == [700, 650, 600]
    for c in search["candidates"]:
        assert [(s["key"], s["value"]) for s in c["settings"]] == [
            ("persistence_mode", True),
            ("power_limit_w", c["value"]),
        ]


def test_one_value_or_no_gpu_is_no_search():
    assert gpu_filters.gpu_settings_settings("all", power_limit_w=650, gpu_count=1, search=True) is None
    assert gpu_filters.gpu_settings_settings("all", power_limit_w=[700, 650], gpu_count=0, search=True) is None


def test_a_bad_candidate_is_named():
    with pytest.raises(AnsibleFilterError, match="gpu_settings_power_limit_watts: candidate 'x'"):
        gpu_filters.gpu_settings_settings("all", power_limit_w=[700, "x"], gpu_count=1)


def test_thp_candidates():
    first = memory_filters.memory_settings(None, thp_enabled=["never", "always"])
    assert [s["value"] for s in first if s["key"].endswith("/enabled")] == ["never"]
    search = memory_filters.memory_settings(None, thp_enabled=["never", "always"], search=True)
    assert search["variable"] == "memory_thp_enabled"
    assert [[s["value"] for s in c["settings"]] for c in search["candidates"]] == [["never"], ["always"]]
    assert memory_filters.memory_settings(None, thp_enabled="never", search=True) is None
    with pytest.raises(AnsibleFilterError, match="one setting is searched at a time"):
        memory_filters.memory_settings(None, thp_enabled=["never", "always"], thp_defrag=["never", "madvise"])


# ---------------------------------------------------------------- a second run after a search

from ansible_collections.stacktune.gpu.plugins.filter.search import search_settled  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.engine import Engine  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.journal import open_journal  # noqa: E402
from ansible_collections.stacktune.gpu.plugins.module_utils.engine.kinds.base import Context  # noqa: E402

POWER = "gpu_settings_power_limit_watts"


def searched(root, layer, variable, values, chosen, decision):
    """A real journal after a search: the layer applied, switched to candidates through the
    engine, then kept (at ``chosen``) or rolled back as the gate_layer action does; returns
    what journal_info lists."""
    journal = open_journal("/var/lib/stacktune", str(root))

    def eng():
        return Engine(Context(layer, root=str(root), run_command=None), journal)

    def rows(v):
        return [{"kind": "sysctl", "key": "vm.swappiness", "value": str(10 + 10 * values.index(v))}]

    eng().apply(rows(values[0]), "run1")
    for v in values:
        eng().switch(rows(v), "run1", v)
    record = {
        "decision": decision,
        "basis": "gain",
        "method": "search",
        "search": {
            "variable": variable,
            "chosen": chosen,
            "rows": [{"arm": "host", "value": None}] + [{"arm": "candidate", "value": v} for v in values],
        },
    }
    if decision == "keep":
        eng().switch(rows(chosen), "run1", chosen)
        eng().keep("run1", record)
    else:
        eng().switch(rows(values[0]), "run1", values[0])
        eng().restore("snapshot", "run1", record)
    return journal.summary()


def test_the_journal_lists_the_last_search_of_a_layer(fakeroot):
    rows = searched(fakeroot, "memory", "swappiness", [30, 10, 1], 10, "keep")
    (row,) = rows
    assert row["state"] == "kept"
    assert row["search"] == {"variable": "swappiness", "candidates": [30, 10, 1], "chosen": 10, "decision": "keep"}


def test_after_a_kept_search_the_chosen_value_stays_and_nothing_is_searched(fakeroot):
    journaled = searched(fakeroot, "gpu_settings", POWER, [700, 650, 600], 650, "keep")
    settings = gpu_filters.gpu_settings_settings("all", power_limit_w=[700, 650, 600], gpu_count=1, journaled=journaled)
    assert [(s["key"], s["value"]) for s in settings] == [("power_limit_w", 650)]
    assert (
        gpu_filters.gpu_settings_settings(
            "all", power_limit_w=[700, 650, 600], gpu_count=1, journaled=journaled, search=True
        )
        is None
    )
    # retry_rejected does not search a kept value again: it is no rejection
    assert search_settled([700, 650, 600], "gpu_settings", POWER, journaled, True)["search"] is False


def test_a_changed_candidate_list_is_a_new_search(fakeroot):
    journaled = searched(fakeroot, "gpu_settings", POWER, [700, 650, 600], 650, "keep")
    for other in ([700, 650, 600, 550], [650, 700, 600]):
        settings = gpu_filters.gpu_settings_settings("all", power_limit_w=other, gpu_count=1, journaled=journaled)
        assert [s["value"] for s in settings] == [other[0]]
        search = gpu_filters.gpu_settings_settings(
            "all", power_limit_w=other, gpu_count=1, journaled=journaled, search=True
        )
        assert [c["value"] for c in search["candidates"]] == other
    # another layer's search is not this one's
    assert search_settled([700, 650, 600], "other", POWER, journaled)["search"] is True


def test_after_a_search_that_kept_the_host_value_nothing_is_searched_unless_retried(fakeroot):
    journaled = searched(fakeroot, "memory", "memory_thp_enabled", ["never", "always"], None, "rollback")
    assert journaled[0]["state"] == "rolled_back"
    first = memory_filters.memory_settings(None, thp_enabled=["never", "always"], journaled=journaled)
    assert [s["value"] for s in first if s["key"].endswith("/enabled")] == ["never"]
    assert (
        memory_filters.memory_settings(None, thp_enabled=["never", "always"], journaled=journaled, search=True) is None
    )
    again = memory_filters.memory_settings(
        None, thp_enabled=["never", "always"], journaled=journaled, retry_rejected=True, search=True
    )
    assert [c["value"] for c in again["candidates"]] == ["never", "always"]
    done = search_settled(["never", "always"], "memory", "memory_thp_enabled", journaled)
    assert done == {
        "value": "never",
        "search": False,
        "why": "memory: the search of memory_thp_enabled kept the host's own value; not searched again "
        "(-e stacktune_retry_rejected=true searches again)",
    }


def test_the_rejected_first_candidate_is_not_applied_again(fakeroot, hash_tree):
    """The engine's own rejected check is what leaves the host alone after a rolled-back search:
    the rollback recorded the first candidate's settings, which the layer applies again."""
    searched(fakeroot, "memory", "swappiness", [30, 10], None, "rollback")
    before = hash_tree(fakeroot)
    eng = Engine(
        Context("memory", root=str(fakeroot), run_command=None), open_journal("/var/lib/stacktune", str(fakeroot))
    )
    result = eng.apply([{"kind": "sysctl", "key": "vm.swappiness", "value": "10"}], "run2")
    assert result["changed"] is False and result["layer_state"] == "rolled_back"
    assert "not re-applied" in result["notes"][-1]
    assert hash_tree(fakeroot) == before


def test_search_settled_refuses_what_is_not_a_candidate_list():
    with pytest.raises(AnsibleFilterError, match="candidate values as a non-empty list"):
        search_settled(700, "gpu_settings", POWER, [])


def test_a_candidate_equal_to_the_host_value_still_counts_as_given(fakeroot):
    """A candidate equal to the host's own value is measured as the host's arm (no row of its
    own); the journal lists the candidates as given, so the same list is found settled."""
    journal = open_journal("/var/lib/stacktune", str(fakeroot))
    eng = Engine(Context("memory", root=str(fakeroot), run_command=None), journal)
    eng.apply([{"kind": "sysctl", "key": "vm.swappiness", "value": "20"}], "run1")
    rows = [{"arm": "host", "value": 6}, {"arm": "candidate", "value": 20}, {"arm": "candidate", "value": 1}]
    search = {"variable": "extra", "chosen": 1, "rows": rows, "candidates": [20, 1, 6]}
    eng.keep("run1", {"decision": "keep", "basis": "gain", "method": "search", "search": search})
    journaled = journal.summary()
    assert journaled[0]["search"]["candidates"] == [20, 1, 6]
    assert search_settled([20, 1, 6], "memory", "extra", journaled) == {
        "value": 1,
        "search": False,
        "why": "memory: the search of extra kept 1; it stays in place",
    }
