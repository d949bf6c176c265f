"""clip-adapt starts from the text prototypes, so on a training split that fits in one minibatch every seed trains
the same head (identical numbers, zero-width across-seed intervals): refused when the run is resolved, before any
model is loaded or feature extracted; one seed, smaller minibatches or a seed-drawing mitigation run."""

from __future__ import annotations

import pytest
from fmb_usage_helpers import tiny_spec

from fairmedbench.benchmark.resolve import resolve_run
from fairmedbench.cli import main
from fairmedbench.errors import InputError


def test_seeds_that_cannot_differ_are_refused_before_any_work(small_clip) -> None:
    with pytest.raises(InputError, match="every seed trains the same head: seeds 0, 1 would give identical"):
        resolve_run(tiny_spec(small_clip, "clip-adapt", seeds=(0, 1)), device="cpu")
    with pytest.raises(InputError, match="mitigation 'groupdro' every seed"):
        resolve_run(tiny_spec(small_clip, "clip-adapt", seeds=(0, 1), mitigation="groupdro",
                              attributes=("sex",)), device="cpu")


@pytest.mark.parametrize("kw", [{"seeds": (0,)}, {"seeds": (0, 1), "hparams": {"batch_size": 8}},
                                {"seeds": (0, 1), "mitigation": "resampling", "attributes": ("sex",)}])
def test_seeds_that_matter_resolve(small_clip, kw) -> None:
    assert resolve_run(tiny_spec(small_clip, "clip-adapt", **kw), device="cpu").config.usage == "clip-adapt"


def test_lp_seeds_set_the_initial_weights_and_resolve() -> None:
    assert resolve_run(tiny_spec("c2l", "lp", seeds=(0, 1)), device="cpu").config.seeds == (0, 1)


def test_compare_refuses_it_in_one_line(small_clip, tmp_path, capsys) -> None:
    rc = main(["compare", "--model", small_clip, "--weights", "random", "--dataset", "synth-control",
               "--dataset-option", "n=40", "--attribute", "sex", "--usage", "clip-adapt", "--mitigations",
               "erm,groupdro", "--seeds", "0,1", "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c"),
               "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 2 and "every seed trains the same head" in err and "Traceback" not in err
    assert not (tmp_path / "c").exists()  # nothing was encoded
