def test_blocks_whose_start_up_dominated_are_named_in_the_details():
    """A program started per block (the user's command in blocks) whose steps were a small share of
    the blocks' time: the details say so and name the way out (a live trial)."""
    from ansible_collections.stacktune.gpu.plugins.module_utils.reporting.decision import details, startup_words

    d = {
        "decision": "keep",
        "method": "blocks",
        "cost": {
            "total": {
                "blocks": 8,
                "wall_s": 100.0,
                "measured_s": 15.0,
                "measured_share": 0.15,
                "startup_s_per_block": 10.6,
            }
        },
    }
    assert startup_words(d) == "steps were 15% of the blocks' time (start-up 10.6 s a block)"
    assert any(line.startswith("Start-up dominated the blocks: steps were 15%") for line in details(d))
    assert startup_words(dict(d, cost={"total": {"measured_share": 0.8}})) == ""
    assert startup_words(dict(d, method="live")) == ""
