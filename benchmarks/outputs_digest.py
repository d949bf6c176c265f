"""Digest of the outputs of a fixed set of runs, evaluations and submissions, for refactors that must not change a
number: run it before and after, then compare the two digests (`--compare BEFORE.json AFTER.json`).

Each JSON is hashed with its timing and path fields removed (they change from run to run and folder to folder);
each Parquet is hashed by its table content (pandas frame, column order kept). Runs use random weights and small
synthetic datasets, so the whole set takes a few minutes on 2 CPU cores. The set: a tiny run per task and usage,
`evaluate` on the demo, on mask files (with empty ground truths) and on the real NIH predictions where present, a
`compare` per task kind (classification, segmentation) and the test suite's fixture bundles submitted to boards.

    python benchmarks/outputs_digest.py --out /tmp/before.json
    python benchmarks/outputs_digest.py --out /tmp/after.json
    python benchmarks/outputs_digest.py --compare /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd

# Keys whose values depend on when or where a command ran, not on what it computed.
VOLATILE = {"timings", "timing", "elapsed_s", "seconds", "created", "created_at", "started", "finished", "host",
            "wall_s", "cpu_s", "path", "out_dir", "cache_dir", "results_dir", "engine_version", "python",
            "torch", "platform", "cpu", "device", "written_at", "date", "time_s", "load_s", "encode_s", "fit_s",
            "score_s", "total_s", "source", "file_path", "root", "bundle", "stored_at", "submitted_at",
            # provenance: the checkout's commit, when a submission was accepted, and submission.json's sha256 of each
            # bundle file (whose bytes hold the run's created_at; the stored files are digested one by one)
            "git_commit", "accepted_at", "files",
            # a submission's seal: an HMAC under the board's random key over files that hold their created_at
            "hmac", "content_sha256",
            # environment.compute: the threads, kernel variables and CPU flags a run computed with
            "compute"}

REAL = Path(os.environ.get("FMB_REAL_DATA", Path(__file__).resolve().parents[2] / "shared" / "real"))
NIH_FILE = Path(tempfile.gettempdir()) / "fmb-digest-nih.csv"  # the NIH predictions joined to their labels


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in sorted(value.items()) if k not in VOLATILE and not k.endswith("_s")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str) and ("/tmp/" in value or value.startswith("/")):
        return "<path>"
    return value


def digest_file(path: Path) -> str:
    """sha256 of a JSON's stable content or of a Parquet's table."""
    if path.suffix == ".json":
        doc = _strip(json.loads(path.read_text()))
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    frame = pd.read_parquet(path)
    body = pd.util.hash_pandas_object(frame, index=True).to_numpy().tobytes()
    return hashlib.sha256(repr(list(frame.columns)).encode() + repr(list(frame.dtypes)).encode() + body).hexdigest()


def _commands(work: Path) -> list[tuple[str, list[str]]]:
    base = ["run", "--weights", "random", "--seeds", "0,1", "--n-boot", "50", "--n-perm", "50",
            "--out", str(work / "results"), "--cache-dir", str(work / "cache"), "--attribute", "sex"]
    small = ["--dataset-option", "n=40"]
    cmds = [
        ("lp", [*base, "--model", "imagenet-resnet50", "--dataset", "synth-contrast", *small, "--usage", "lp"]),
        ("lp-groupdro", [*base, "--model", "imagenet-resnet50", "--dataset", "synth-contrast", *small, "--usage",
                         "lp", "--mitigation", "groupdro"]),
        ("lora", [*base, "--model", "imagenet-resnet50", "--dataset", "synth-contrast", *small, "--usage", "lora",
                  "--hparam", "epochs=1", "--hparam", "lora_r=2"]),
        ("multiclass", [*base, "--model", "moco-cxr", "--dataset", "synth-ordinal", "--dataset-option", "n=60",
                        "--usage", "lp"]),
        ("sam-prompt", [*base, "--model", "litemedsam", "--dataset", "synth-contrast", "--dataset-option", "n=16",
                        "--usage", "sam-prompt"]),
        # n=24: the smallest synth-contrast whose validation split holds a non-empty mask (decoder selection needs one)
        ("sam-decoder", [*base, "--model", "litemedsam", "--dataset", "synth-contrast", "--dataset-option", "n=24",
                         "--usage", "sam-decoder", "--hparam", "epochs=1"]),
        ("evaluate-demo", ["evaluate", "--demo", "--out", str(work / "eval" / "demo.json"), "--n-boot", "200",
                           "--out-table", str(work / "eval" / "demo.parquet")]),
        # 40 mask pairs, 10 with an empty ground truth: the segmentation task leaves those rows out of every metric
        ("evaluate-masks", ["evaluate", "--predictions", str(_mask_file()), "--masks", "--attribute", "sex",
                            "--n-boot", "100", "--n-perm", "100", "--out", str(work / "eval" / "masks.json")]),
        ("compare-lp", ["compare", *base[1:], "--model", "imagenet-resnet50", "--dataset", "synth-contrast", *small,
                        "--usage", "lp", "--mitigations", "erm,groupdro"]),
        ("compare-sam-decoder", ["compare", *base[1:], "--model", "litemedsam", "--dataset", "synth-contrast",
                                 "--dataset-option", "n=24", "--usage", "sam-decoder", "--hparam", "epochs=1",
                                 "--mitigations", "erm,groupdro"]),
    ]
    if (REAL / "nih-cxr14" / "preds.csv").exists():
        nih = NIH_FILE  # one path in every digest: an evaluation's run id hashes the predictions file's path
        findings = _nih_file(nih)
        cmds.append(("evaluate-nih", ["evaluate", "--predictions", str(nih), "--label", ",".join(findings),
                                      "--score", ",".join(f"prob_{f}" for f in findings),
                                      "--attribute", "Patient Gender,Patient Age", "--bins", "Patient Age=0,40,60,200",
                                      "--n-boot", "100", "--n-perm", "100", "--out", str(work / "eval" / "nih.json"),
                                      "--out-table", str(work / "eval" / "nih.parquet")]))
    return cmds


def _mask_file() -> Path:
    """A masks CSV of 40 fixed 16 x 16 prediction / ground-truth pairs in two groups; every fourth ground truth is
    empty (its prediction is not)."""
    import numpy as np

    folder = Path(tempfile.gettempdir()) / "fmb-digest-masks"  # one path in every digest (it is in the run id)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(40):
        gt = np.zeros((16, 16), dtype=np.uint8)
        if i % 4:
            gt[4:12, 4:12] = 1
        pred = np.zeros((16, 16), dtype=np.uint8)
        pred[4:12, 4 + i % 5:12 + i % 5] = 1  # shifted by 0-4 px
        np.save(folder / f"gt{i}.npy", gt)
        np.save(folder / f"pred{i}.npy", pred)
        rows.append({"pred_mask": f"pred{i}.npy", "gt_mask": f"gt{i}.npy", "sex": "F" if i % 2 else "M",
                     "patient_id": f"p{i}", "split": "test"})
    path = folder / "masks.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _nih_file(path: Path) -> list[str]:
    """The CheXNet NIH test predictions joined to the official metadata (labels from `Finding Labels`), as
    tests/test_real_nih.py builds them; returns the findings."""
    root = REAL / "nih-cxr14"
    meta = pd.read_csv(root / "Data_Entry_2017_v2020.csv.gz")
    df = pd.read_csv(root / "preds.csv").merge(
        meta[["Image Index", "Finding Labels", "Patient Age", "Patient Gender", "Patient ID"]], on="Image Index",
        how="left", validate="one_to_one")
    findings = pd.read_csv(root / "aucs.csv")["label"].tolist()
    labels = df["Finding Labels"].str.split("|")
    for f in findings:
        df[f] = labels.apply(lambda items, f=f: int(f in items))
    df.to_csv(path, index=False)
    return findings


def _submit_bundles(work: Path) -> dict[str, str]:
    """Submit the test suite's fixture bundles (pinned classification + segmentation, multi-class) to fresh boards."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "leaderboards"))
    import bundle_factory as bf  # the tests' bundle writer: the fixture bundles the acceptance names

    from fairmedbench.leaderboards.submit import submit
    from fairmedbench.leaderboards.suites import SUITES, Entry, Suite, register_suite

    if "digest-multiclass" not in SUITES:
        register_suite(Suite("digest-multiclass", "1.0", "multi-class fixture suite", (
            bf.pinned(Entry("synth-ordinal", ("sex",), "linear_probe", task="multiclass", seeds=(0, 1))),)))
    out: dict[str, str] = {}
    for suite in (bf.pinned_suite(), SUITES.get("digest-multiclass")):
        root = work / "boards" / suite.name
        bundle = bf.write_bundle(work / "bundles" / suite.name, suite, bf.model_card(f"{suite.name}-model"))
        outcome = submit(bundle, suite, root)
        out[f"submit/{suite.name}/outcome"] = hashlib.sha256(
            repr((outcome.accepted, outcome.reasons, outcome.flags)).encode()).hexdigest()
        for f in sorted(root.rglob("*")):
            if f.suffix in (".json", ".parquet"):
                out[f"submit/{suite.name}/{f.relative_to(root)}"] = digest_file(f)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the digest JSON here")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--only", help="comma-separated command names")
    ap.add_argument("--keep", help="write the outputs into this folder and keep them (default: a temporary folder)")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        bad = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        for k in bad:
            print(f"DIFFERS {k}: {a.get(k, '<missing>')[:12]} vs {b.get(k, '<missing>')[:12]}")
        print(f"{len(a.keys() & b.keys()) - len([k for k in bad if k in a and k in b])} identical, "
              f"{len(bad)} differ or missing")
        return 1 if bad else 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fairmedbench.cli import main as cli

    only = set(args.only.split(",")) if args.only else None
    digest: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="fmb-digest-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name, argv in _commands(work):
            if only and name not in only:
                continue
            print(f"== {name}", flush=True)
            try:
                digest[f"{name}/exit"] = str(cli(argv))
            except SystemExit as exc:  # an argparse error: recorded, and the other commands still run
                digest[f"{name}/exit"] = str(exc.code)
        for f in sorted((work / "results").rglob("*")) + sorted((work / "eval").rglob("*")):
            if f.suffix in (".json", ".parquet"):
                key = "/".join(p for p in f.relative_to(work).parts if not p.startswith("run-"))
                digest[key] = digest_file(f)
        if not only or "submit" in only:
            digest.update(_submit_bundles(work))
    text = json.dumps(digest, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text)
    print(f"{len(digest)} outputs digested")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
