from flowc.passes.stats import collect, count


def test_count_lands_in_the_innermost_scope_only():
    with collect() as outer:
        count("nodes-folded", 2)
        with collect() as inner:
            count("nodes-folded")
        count("nodes-folded", 0)
    assert outer == {"nodes-folded": 2}
    assert inner == {"nodes-folded": 1}


def test_count_outside_a_scope_is_ignored():
    count("nodes-folded", 5)  # must not raise
    with collect() as counters:
        pass
    assert counters == {}
