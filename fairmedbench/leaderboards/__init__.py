"""Leaderboards: board suites, submission checks by recomputation, board pages. Never imports torch or unpickles.

A board answers one suite (`suites.py`: a named, versioned list of entries, each a dataset, attributes,
usage, task, metric profile, seeds and the pinned test set). A submission is a bundle folder:

    BUNDLE/
      model.json   {"name", "revision", "weights_sha256" (64 hex or null), "license", "family",
                    "kind" (vision | vision-language | segmentation), "pretraining_data": [dataset names]}
                   name matches ^[a-z0-9][a-z0-9._-]{0,63}$ and is a registered model card (its fields equal the
                   card's), or the bundle carries
      card.json    a new card (`submit.CARD_SCHEMA`): name, description (the only free text), family, kind,
                   license, weights {url, hub_id}, pretraining_data, training_datasets
      suite.json   {"name", "version"}                      the suite (= board) the bundle answers
      results/<entry_key>/seed<k>.json                      a result document (engine.store.result_document)
      results/<entry_key>/seed<k>.predictions.parquet       its predictions (engine.store module docstring)
      results/<entry_key>/seed<k>.external<j>.predictions.parquet   the test predictions on the entry's j-th
                   external dataset (an entry that declares `suites.External` datasets; leaderboards/external.py)

entry_key = f"{dataset}__{usage}__{'+'.join(attributes)}"; k runs over the entry's seeds. A bundle may
answer a subset of the suite's entries, but every seed of each entry it answers. In each result document:
  kind = "run-classification" | "run-segmentation" | "run-multiclass";
  spec = RunSpec.identity() plus "seed": k (spec.model, dataset, attributes, usage, profile must match);
  inputs = {"dataset": {"name", "fingerprint", "split_fingerprint", "test_fingerprint", "n_test"},
            "model": {"name", "weights_sha256"}} (the model fields equal model.json's);
  run_id = store.run_id({"kind", "spec", "inputs"}) as result_document computes it;
  predictions = tasks.base.get_task(task).predictions_block("seed<k>.predictions.parquet", tasks, attributes,
                                                             <the dataset card's classes>).
test_fingerprint = sha256 hex of "\\n".join(sorted(test sample ids)) in utf-8 (`suites.test_fingerprint`).
The Parquet holds val and test rows (classification; val picks the threshold) or test rows (segmentation;
columns dsc, iou, empty_gt and optionally hd95: one row per test sample; a sample with an empty ground truth
cannot be prompted, so its row has empty_gt true and null scores, it counts as a covered test id and is left out
of every metric and flag; the result's usage.skipped, when present, names exactly those sample ids; hd95 may also
be null where the predicted mask is empty, as HD95 is undefined there: submit accepts a null only where dsc is 0
(what an empty prediction scores), and `verify`'s re-run checks that the same rows are null), seed = k on every
row, attr:<a> = group names (null = missing). A multi-class result (predictions.classes = the dataset
card's classes, in order) has one `label` column, a class index 0..C-1 or a class name, and one probability
column score:<class> per class, each in [0, 1], every row summing to 1 within
`metrics.multiclass.PROB_SUM_TOLERANCE` (1e-3, the engine's own check); it is recomputed by the multiclass
task's scorer (argmax decision, no threshold) and ranked by its headline, macro AUC.

`submit` accepts a bundle only when: every file is a regular .json or .parquet file (no symlinks, no
pickles or zip archives, Parquet magic present, strict JSON without NaN), within the size limits
(`recompute.Limits`); model.json and suite.json follow their schemas; each result validates against
engine/result_schema.json and matches its entry, seed and model card; predictions.file names the Parquet
beside it (no absolute path, no '..'); predictions have finite scores and the test ids match the
board's pinned test set (when pinned; else the result's own test_fingerprint and n_test; on a board whose
test set ships its id list, `testsets.TestSet.ids_file`, any non-empty subset of it: coverage is recorded
and partial rows are ranked separately); and
the entry's task's scorer (`Task.score`, the one runs use), run on the test rows with the settings in result.meta
as a `ScoreSettings` (profile, threshold policy on the val rows, n_boot, n_perm, seed, ci_level, min_group_size,
operating points, ECE bins; groups in the reported order), reproduces every reported value, CI, count
and threshold within 1e-9; for an entry with external datasets, so does each external result and every shift
(external − internal, `analysis.shift`), from the two predictions files (`external.check_seed`).
Recomputation proves the arithmetic, not where the predictions came from: every row
carries the flags of `flags.FLAGS` (one fact and one check each: no weights hash, weights not public, data seen
in pretraining, near-perfect or duplicate predictions, implausible group scores, test set not pinned,
verification failed) and a tier (`tiers`): `self-reported`, or `verified` once `benchmark verify` re-ran the
model from its declared weights on a seeded sample of test items and matched every per-sample score within the
board's tolerance (`suites.Suite.tolerances`, per precision of the run; `verify --tolerance` may only tighten it)
(verification.json beside submission.json, bound to the submission's sealed content hash and MACed under the
board's key). An accepted bundle is copied, from the bytes that were checked, to a staging folder under the board,
with a submission.json summary, sealed (`seal`: seal.json, an HMAC-SHA256 under the board's key of the content hash
of every file) and renamed to leaderboards/<board>/submissions/<model>/<revision>/ (names made folder-safe by
`submit.slug`); a rejected one writes nothing.

`board.build` checks each stored submission's seal under the board's key, re-runs `submit`'s checks and
recomputation on its stored files and compares every number its submission.json shows (a submission that fails is
listed as refused, with the reasons and no number, never ranked), then writes leaderboards/<board>/index.html
(static: inline CSS/JS/SVG, a Content-Security-Policy that allows only its own script and no network;
every submitted text HTML-escaped), leaderboard.md (README tables) and board.json; the ranking rule,
NaN last, is `board.RANKING_RULE` and is printed on the page, with the flag and tier legends: only verified
rows are ranked (self-reported rows are listed in their own table, unranked), a row flagged
`flags.UNRANKED_FLAGS` (verification failed, near-perfect or duplicate predictions) is never ranked, and one
flagged `flags.UNTIL_VERIFIED_FLAGS` (implausible group scores) not until it is verified. model.json names the
weights by sha256 (a seeded random init by its runs' 'random:seed=N'); spec.weights of every run must equal it,
and the row's revision is shown bound to it (`submit.revision_label`); without either the row is 'weights not
provided' and `verify` refuses it. Flags are recomputed at build time from the stored predictions; a duplicate
is looked for only among the submissions accepted before (by accept time), so the later copy is flagged.
"""
