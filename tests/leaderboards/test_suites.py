"""Board suites: entry keys, pending pins, the test fingerprint's definition, the built-in suites."""

from __future__ import annotations

import hashlib

import pytest

from fairmedbench.errors import InputError
from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, get_suite
from fairmedbench.leaderboards.suites import test_fingerprint as fingerprint_of


def test_entry_key_and_kind() -> None:
    e = Entry("nih-cxr14", ("sex", "age"), "linear_probe")
    assert e.key == "nih-cxr14__linear_probe__sex+age"
    assert e.kind == "run-classification"
    assert Entry("ham10000", ("sex",), "sam_prompt", task="segmentation").kind == "run-segmentation"


def test_pending_until_every_pin_is_set() -> None:
    assert Entry("d", ("sex",), "u").pending
    assert Entry("d", ("sex",), "u", split_fingerprint="a", test_fingerprint="b").pending
    assert not Entry("d", ("sex",), "u", split_fingerprint="a", test_fingerprint="b", n_test=3).pending


def test_test_fingerprint_definition() -> None:
    ids = ["b2", "a1", "c3"]
    assert fingerprint_of(ids) == hashlib.sha256(b"a1\nb2\nc3").hexdigest()
    assert fingerprint_of(reversed(ids)) == fingerprint_of(ids)


def test_bad_suites_are_refused() -> None:
    with pytest.raises(ValueError, match="task must be one of"):
        Entry("d", ("sex",), "u", task="detection")
    with pytest.raises(ValueError, match="lists an entry twice"):
        Suite("s", "1", "d", (Entry("d", ("sex",), "u"), Entry("d", ("sex",), "u")))
    with pytest.raises(InputError, match="no entry 'x'"):
        get_suite("synthetic").entry("x")


def test_builtin_suites() -> None:
    assert {"synthetic", "synthetic-seg", "nih-cxr14", "ham10000", "chexpert"} <= set(SUITES.names())
    synth = get_suite("synthetic")
    assert [e.dataset for e in synth.entries] == ["synth-control", "synth-contrast"]
    assert all(e.attributes == ("sex", "age") and e.seeds == (0, 1, 2) for e in synth.entries)
    assert {e.task for e in get_suite("synthetic-seg").entries} == {"segmentation"}
    assert "race" in get_suite("chexpert").entries[0].attributes
