"""How numbers read for people (routerscope/core/text.py): one definition for the terminal and the pages."""

from routerscope.core.text import ci, counts, pct, verdict


def test_a_percentage_and_its_interval():
    assert pct(0.1234) == "12.3%" and pct(None) == "—"
    assert ci([0.1, 0.142]) == " [10.0%, 14.2%]" and ci(None) == ""


def test_counts_read_as_words_largest_first_never_a_dict():
    assert counts({"cloud": 2, "device": 3}) == "served by the device 3, the cloud 2"
    assert counts({"device": 1200}) == "served by the device 1,200"
    assert counts({}) == "none served"


def test_a_readiness_verdict_reads_as_words_on_the_terminal_and_the_pages():
    assert verdict("not_ready") == "not ready" and verdict("ready") == "ready" and verdict(None) == "—"
