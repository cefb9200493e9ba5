"""How numbers read for people (routerscope/core/text.py): one definition for the terminal and the pages."""

from routerscope.core.text import ci, counts, estimate, pct, verdict


def test_a_percentage_and_its_interval():
    assert pct(0.1234) == "12.3%" and pct(None) == "—"
    assert ci([0.1, 0.142]) == " [10.0%, 14.2%]" and ci(None) == ""


def test_counts_read_as_words_largest_first_never_a_dict():
    assert counts({"cloud": 2, "device": 3}) == "served by the device 3, the cloud 2"
    assert counts({"device": 1200}) == "served by the device 1,200"
    assert counts({}) == "none served"


def test_a_readiness_verdict_reads_as_words_on_the_terminal_and_the_pages():
    assert verdict("not_ready") == "not ready" and verdict("ready") == "ready" and verdict(None) == "—"


def test_an_estimate_reads_with_its_interval_and_warns_when_its_labels_cover_too_little():
    est = {"rate": 0.291, "ci": [0.27, 0.313], "n_eff": 1204.0, "coverage": 1.0}
    assert estimate(est, 0.8) == "29.1% [27.0%, 31.3%]"
    assert estimate({**est, "coverage": 0.62}, 0.8) == "29.1% [27.0%, 31.3%] ⚠ labels cover 62% of them"
    assert estimate(None, 0.8) == "—" and estimate({"rate": None}, 0.8) == "—"
