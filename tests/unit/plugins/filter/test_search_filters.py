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
