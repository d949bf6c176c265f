"""Issue 28.2 and its smaller items: an evidence pack folder must be new, empty, or hold an earlier pack that
fairmedbench recognises by its own MANIFEST.sha256; only the files that manifest lists are replaced, through a
staging folder whose files are moved in (a failure at any point leaves the earlier pack whole); anything else, a
file, or a broken link is refused in one line before any work."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from fairmedbench.benchmark import evidence
from fairmedbench.benchmark.evidence import MANIFEST
from fairmedbench.cli import main
from fairmedbench.engine import store
from fairmedbench.errors import InputError

DEMO = ["evaluate", "--demo", "--n-boot", "0", "--n-perm", "0"]


def write_pack(folder: Path, text: str, seeds: tuple[int, ...] = (0,)) -> None:
    """A pack as the product writes one (environment.json, a summary, results/seed<k>.json, the manifest)."""
    with evidence.staged(folder, force=True) as stage:
        store.write_json(stage / "environment.json", {"fairmedbench_version": "test", "packages": {}})
        store.write_text(stage / "summary.md", text)
        for s in seeds:
            store.write_text(stage / "results" / f"seed{s}.json", f'{{"seed": {s}, "text": "{text}"}}')
        evidence.write_manifest(stage)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def verifies(folder: Path) -> bool:
    return all(hashlib.sha256((folder / rel).read_bytes()).hexdigest() == digest
               for digest, rel in (line.split("  ", 1) for line in (folder / MANIFEST).read_text().splitlines()))


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and all(n in err[0] for n in needles), err
    return err[0]


def test_an_earlier_pack_is_replaced_file_by_file_and_nothing_else_is_touched(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    write_pack(pack, "one", seeds=(0, 1))
    (pack / "notes.txt").write_text("mine")
    (pack / "results" / "mine.csv").write_text("a,b\n")
    write_pack(pack, "two", seeds=(0,))
    assert snapshot(pack) == {**snapshot_of_pack(pack), "notes.txt": b"mine", "results/mine.csv": b"a,b\n"}
    assert not (pack / "results" / "seed1.json").exists()  # the earlier pack's, not in the new one: gone
    assert (pack / "summary.md").read_text() == "two" and verifies(pack)
    assert "notes.txt" not in (pack / MANIFEST).read_text()
    assert not list(pack.glob(".tmp-*"))
    write_pack(pack, "three", seeds=(2,))  # results/ keeps the user's file, so it stays
    assert sorted(p.name for p in (pack / "results").iterdir()) == ["mine.csv", "seed2.json"]
    (pack / "results" / "mine.csv").unlink()
    write_pack(pack, "four", seeds=())  # an emptied subfolder of the earlier pack goes with its files
    assert not (pack / "results").exists() and verifies(pack)


def snapshot_of_pack(pack: Path) -> dict[str, bytes]:
    listed = [line.split("  ", 1)[1] for line in (pack / MANIFEST).read_text().splitlines()]
    return {rel: (pack / rel).read_bytes() for rel in [*listed, MANIFEST]}


@pytest.mark.parametrize("fail_at", range(1, 10))
def test_a_failure_while_moving_the_new_pack_in_leaves_the_earlier_pack(tmp_path: Path, fail_at: int,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The swap's renames fail at each step in turn (the earlier pack's 5 files out, the new one's 4 in): every
    move is undone."""
    pack = tmp_path / "pack"
    write_pack(pack, "one", seeds=(0, 1))
    (pack / "notes.txt").write_text("mine")
    before = snapshot(pack)
    real, calls = os.replace, []

    def replace(src: str | Path, dst: str | Path) -> None:
        calls.append(1)
        if len(calls) == fail_at:
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        real(src, dst)

    monkeypatch.setattr(evidence.os, "replace", replace)
    with pytest.raises(OSError, match="No space left"):
        with evidence.staged(pack, force=True) as stage:
            monkeypatch.setattr(evidence.os, "replace", real)  # the staged writes themselves succeed
            store.write_json(stage / "environment.json", {"fairmedbench_version": "test"})
            store.write_text(stage / "summary.md", "two")
            store.write_text(stage / "results" / "seed5.json", "{}")
            evidence.write_manifest(stage)
            monkeypatch.setattr(evidence.os, "replace", replace)
    assert snapshot(pack) == before and verifies(pack)
    assert not list(pack.glob(".tmp-*"))


def test_a_full_disk_while_writing_the_pack_leaves_the_earlier_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "pack"
    assert main([*DEMO, "--evidence", str(pack)]) == 0
    (pack / "notes.txt").write_text("mine")
    before = snapshot(pack)
    real = store._atomic

    def full(path: Path, write):  # the disk fills up when the manifest is written
        if Path(path).name == MANIFEST:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, write)

    monkeypatch.setattr(store, "_atomic", full)
    refused(capsys, [*DEMO, "--n-boot", "20", "--evidence", str(pack), "--force"], "No space left on device")
    assert snapshot(pack) == before and verifies(pack)
    assert not list(pack.glob(".tmp-*"))
    monkeypatch.setattr(store, "_atomic", real)
    new = tmp_path / "new"  # a pack folder this command was to create: not left behind, half-written or empty
    monkeypatch.setattr(store, "_atomic", full)
    refused(capsys, [*DEMO, "--evidence", str(new)], "No space left on device")
    assert not new.exists()


def test_a_broken_link_or_a_file_is_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    import fairmedbench.benchmark.evaluate as evaluate_mod
    import fairmedbench.benchmark.run as run_mod

    def no_work(*_: object, **__: object) -> None:
        raise AssertionError("the work started before the pack folder was checked")

    monkeypatch.setattr(evaluate_mod, "_load", no_work)
    monkeypatch.setattr(run_mod, "run", no_work)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    (tmp_path / "f").write_text("x")
    run = ["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-contrast"]
    for argv in (DEMO, [*run, "--out", str(tmp_path / "r")]):
        for force in ([], ["--force"]):
            refused(capsys, [*argv, "--evidence", str(link), *force],
                    f"--evidence {link}: is a symbolic link to {tmp_path / 'nowhere'}, which does not exist")
            refused(capsys, [*argv, "--evidence", str(tmp_path / "f"), *force], "is a file")
    assert (tmp_path / "f").read_text() == "x" and link.is_symlink() and not link.exists()
    # the run's results inside its own evidence pack would make the pack a folder of other files
    refused(capsys, [*run, "--out", str(tmp_path / "e" / "r"), "--evidence", str(tmp_path / "e")], "the run's --out",
            "is inside it")
    refused(capsys, [*DEMO, "--out", str(tmp_path / "p" / "sub" / "r.json"), "--evidence", str(tmp_path / "p")],
            "inside a subfolder of --evidence")


def test_a_link_to_a_folder_is_a_pack_folder(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    write_pack(tmp_path / "link", "one")
    write_pack(tmp_path / "link", "two")
    assert (tmp_path / "real" / "summary.md").read_text() == "two" and (tmp_path / "link").is_symlink()


def _refusal(folder: Path) -> str:
    with pytest.raises(InputError) as err:
        evidence.check(folder, force=True)
    return str(err.value)


def test_what_is_not_an_untouched_pack_of_ours_is_refused_even_with_force(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    write_pack(pack, "one")
    before = snapshot(pack)
    (pack / "summary.md").write_text("one, with my remarks")  # an edited file holds the user's words
    assert "summary.md was changed since the pack was written" in _refusal(pack)
    (pack / "summary.md").write_bytes(before["summary.md"])
    (pack / "table.csv").write_text("mine")  # a name the new pack writes, not the earlier pack's
    assert "table.csv there is not a file of the earlier pack" in _refusal(pack)
    (pack / "table.csv").unlink()
    assert evidence.check(pack, force=True) == pack
    # a sha256sum manifest of the user's own files, or one that reaches outside the folder, is not ours
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    subprocess.run(f"sha256sum thesis.tex > {MANIFEST}", shell=True, cwd=other, check=True)
    assert f"its {MANIFEST} is not one fairmedbench wrote" in _refusal(other)
    (tmp_path / "secret").write_text("s")
    digest = hashlib.sha256(b"s").hexdigest()
    (pack / MANIFEST).write_text((pack / MANIFEST).read_text() + f"{digest}  ../secret\n")
    assert "lists '../secret', which is not a file inside the pack" in _refusal(pack)
    assert (tmp_path / "secret").read_text() == "s"
    assert "not an evidence pack" in _refusal(tmp_path)  # no manifest at all


def test_a_killed_writers_staging_folder_does_not_block_the_next_pack(tmp_path: Path) -> None:
    pack = tmp_path / "pack"
    pack.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = store.staging_dir(pack, "evidence")
    stale = stale.rename(stale.with_name(stale.name.replace(f"-{os.getpid()}@", f"-{dead.pid}@")))
    (stale / "summary.md").write_text("half")
    assert evidence.check(pack, force=False) == pack  # empty but for our own leftovers
    write_pack(pack, "one")
    assert not stale.exists() and verifies(pack)


def test_a_run_folder_left_by_a_full_disk_keeps_what_the_run_did_not_write(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import fairmedbench.benchmark.run as run_mod

    def full(resolved, opts, out_dir):  # a user's file lands in the new run folder, then the disk fills up
        (out_dir / "notes.txt").write_text("mine")
        raise OSError(errno.ENOSPC, "No space left on device", str(out_dir / "seed0.json"))

    monkeypatch.setattr(run_mod, "_compute", full)
    assert main(["run", "--model", "moco-cxr", "--weights", "random", "--dataset", "synth-contrast",
                 "--dataset-option", "n=24", "--out", str(tmp_path / "o"), "--cache-dir", str(tmp_path / "c")]) == 2
    (notes,) = (tmp_path / "o" / "runs").rglob("notes.txt")
    assert notes.read_text() == "mine" and sorted(p.name for p in notes.parent.iterdir()) == ["notes.txt"]
