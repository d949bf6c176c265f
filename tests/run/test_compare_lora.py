"""`benchmark compare --usage lora` with lnl and end: the usage reaches every run, both methods train their
encoder, and the page names each method against ERM (a tiny random-weight ResNet-18 at 32 px, two seeds)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from fairmedbench.cli import main


@pytest.fixture
def small_c2l():
    """c2l (ResNet-18) with its input size set to 32 px: the real architecture with random weights, ~50x cheaper
    per image than at 224 px."""
    from fairmedbench.registry.models import MODELS, get_card

    card = get_card("c2l")
    small = dataclasses.replace(card, preprocessing=dataclasses.replace(card.preprocessing, size=32))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(MODELS._items, "c2l", small)
        yield "c2l"


@pytest.mark.slow  # ~17 CPU-s (six LoRA trainings); its cheap sibling is the next test
def test_lora_compare_with_lnl_and_end_runs_end_to_end(small_c2l: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = json.dumps({"size": 32, "split_fractions": [0.5, 0.2, 0.3]})
    rc = main(["compare", "--model", small_c2l, "--weights", "random", "--dataset", "synth-underrep",
               "--dataset-option", "n=40", "--dataset-option", f"config={config}", "--attribute", "sex",
               "--usage", "lora", "--mitigations", "erm,lnl,end", "--seeds", "0-1", "--hparam", "epochs=2",
               "--hparam", "batch_size=8", "--n-boot", "20", "--n-perm", "0", "--report",
               "--out", str(tmp_path / "r"), "--cache-dir", str(tmp_path / "c")])
    assert rc == 0, capsys.readouterr().err
    (path,) = (tmp_path / "r" / "compare").glob("*.json")
    doc = json.loads(path.read_text())
    assert doc["methods"] == ["erm", "lnl", "end"]
    for method in doc["methods"]:
        run_dir = Path(doc["runs"][f"synth-underrep|{method}"])
        seed = json.loads((run_dir / "seed0.json").read_text())
        assert seed["spec"]["usage"] == "lora" and seed["usage"]["lora"]["target_leaves"] == ["conv1", "conv2"]
        assert seed["training"]["mitigation"]["name"] == method and len(seed["training"]["val_losses"]) == 2
    assert {r["method"] for r in doc["versus_erm"]} <= {"lnl", "end"}
    page = path.with_suffix(".html").read_text()
    assert "against ERM, per method" in page
    for method in ("lnl", "end"):
        assert f"<td>{method}</td>" in page or f">{method}<" in page


class _Stop(Exception):
    pass


def test_compare_hands_lora_to_every_method_and_refuses_lp_first(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The cheap sibling of the run above: compare gives every method's run --usage lora (and the split seeds),
    and with --usage lp refuses lnl and end before any run."""
    from fairmedbench.benchmark import compare as compare_module
    from fairmedbench.benchmark.run import RunOptions
    from fairmedbench.errors import InputError

    runs: list = []

    def fake_run(spec, opts):  # records each method's spec; stops once the three are recorded
        runs.append(spec)
        if len(runs) == 3:
            raise _Stop

    monkeypatch.setattr(compare_module, "run", fake_run)
    opts = RunOptions(out_root=str(tmp_path / "r"), cache_dir=str(tmp_path / "c"), device="cpu")
    args = ("c2l", ["synth-underrep"], "sex")
    kw = {"weights": "random", "dataset_options": {"n": 60}, "split_seeds": (0, 1, 2)}
    with pytest.raises(_Stop):
        compare_module.compare(*args, "lora", ["lnl", "end"], (0, 1, 2), opts, **kw)
    assert [(s.mitigation, s.usage, s.split_seeds, s.seeds) for s in runs] == [
        (m, "lora", (0, 1, 2), (0, 1, 2)) for m in ("erm", "lnl", "end")]
    runs.clear()
    for method in ("lnl", "end"):
        with pytest.raises(InputError, match=f"mitigation {method!r} does not apply to usage 'lp'"):
            compare_module.compare(*args, "lp", [method], (0, 1, 2), opts, **kw)
    assert runs == [] and not (tmp_path / "r").exists()
