"""`benchmark serve`'s HTTP side through FastAPI's TestClient: every hostile input of issue 31 (tokens, another's
model, size and daily caps, the queue bound, SQL metacharacters, script-bearing names, tokens in logs), submit's
refusals arriving over HTTP, idempotency, withdrawal and the audit log."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from serve_support import Clock, auth, tar_of

from fairmedbench.errors import InputError
from fairmedbench.leaderboards.submit import validate_bundle
from fairmedbench.leaderboards.suites import Suite
from fairmedbench.serve import db, tokens
from fairmedbench.serve.service import DAY, Service, Settings


def _post(client: Any, body: bytes, token: str | None, **params: str) -> Any:
    return client.post("/api/submissions", content=body, headers=auth(token) if token else {}, params=params)


def _header_only(tmp: Path, suite: Suite, name: str = "m-x", revision: str = "r1") -> bytes:
    """A bundle of model.json and suite.json only: received, then rejected by submit's checks (no results)."""
    folder = tmp / f"hdr-{abs(hash((name, revision)))}"
    folder.mkdir()
    (folder / "model.json").write_text(json.dumps({"name": name, "revision": revision}))
    (folder / "suite.json").write_text(json.dumps({"name": suite.name, "version": suite.version}))
    return tar_of(folder)


def test_tokens_are_stored_as_salted_hashes_only(service: Service) -> None:
    token = service.add_token("alice")
    assert tokens.token_id(token) is not None
    with service.engine.connect() as conn:
        row = conn.execute(sa.select(db.submitters)).one()
    secret = tokens.TOKEN_RE.fullmatch(token).group(2)  # the secret may hold '_': split("_") would cut it
    assert token not in row.token_hash and secret not in row.token_hash
    scheme, iterations, salt, digest = row.token_hash.split("$")
    assert scheme == "pbkdf2_sha256" and int(iterations) == tokens.ITERATIONS and len(bytes.fromhex(salt)) == 16
    assert tokens.check_token(token, row.token_hash) and not tokens.check_token(token + "x", row.token_hash)
    assert tokens.hash_token(token) != tokens.hash_token(token)  # a fresh salt each time


@pytest.mark.parametrize("case", ["none", "not bearer", "malformed", "wrong secret", "revoked", "expired"])
def test_bad_tokens_get_401_and_store_nothing(case: str, service: Service, client: Any, clock: Clock,
                                              bundles: dict[str, Path]) -> None:
    good = service.add_token("alice", expires_days=2)
    headers = {"none": {}, "not bearer": {"Authorization": f"Token {good}"},
               "malformed": auth("fmb_nothex_short"), "wrong secret": auth(good[:-4] + "AAAA"),
               "revoked": auth(good), "expired": auth(good)}[case]
    if case == "revoked":
        service.revoke("alice")
    if case == "expired":
        clock.advance(2 * DAY)
    r = client.post("/api/submissions", content=tar_of(bundles["a"]), headers=headers)
    assert r.status_code == 401, r.text
    assert good not in r.text
    assert service.submissions_of() == [] and not any((service.boards / "test-pinned").glob("submissions/*"))
    clock.t -= 4 * DAY  # the same token before its expiry, before the revocation: accepted only if not revoked
    if case == "expired":
        assert _post(client, b"not a tar", good).status_code == 400


def test_accepted_then_idempotent_by_content_hash(service: Service, client: Any, bundles: dict[str, Path]) -> None:
    token = service.add_token("alice")
    body = tar_of(bundles["a"])
    first = _post(client, body, token)
    assert first.status_code == 201, first.text
    sub = first.json()
    assert sub["state"] == "queued" and sub["tier"] == "self-reported" and sub["model"] == "m-a"
    assert [e["state"] for e in sub["events"]] == ["received", "accepted", "queued"]
    again = _post(client, body, token)
    assert again.status_code == 200 and again.json()["id"] == sub["id"]
    assert len(service.submissions_of()) == 1 and len(service.queue()) == 1
    stored = list((service.boards / "test-pinned" / "submissions").glob("*/*"))
    assert [p.relative_to(service.boards / "test-pinned").as_posix() for p in stored] == ["submissions/m-a/r1"]
    page = client.get(f"/submissions/{sub['id']}")
    assert page.status_code == 200 and "queued" in page.text and "self-reported" in page.text
    assert client.get("/api/queue").json()[0]["submission_id"] == sub["id"]
    rows = client.get("/api/boards/test-pinned/rows").json()["rows"]
    assert rows and {r["model"] for r in rows} == {"m-a"} and {r["tier"] for r in rows} == {"self-reported"}


def test_what_submit_refuses_is_refused_over_http_with_the_same_reasons(
        service: Service, client: Any, suite: Suite, bundles: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    token = service.add_token("alice")
    broken = Path(shutil.copytree(bundles["b"], tmp_path / "broken"))
    doc_path = next((broken / "results").rglob("seed0.json"))
    doc = json.loads(doc_path.read_text())
    doc["result"]["meta"]["n_boot"] = doc["result"]["meta"].get("n_boot", 30) + 1  # a setting that changes the CIs
    doc_path.write_text(json.dumps(doc))
    (broken / "extra.pkl").write_bytes(b"\x80\x04pickle")
    local, _, _ = validate_bundle(broken, suite)
    assert local
    r = _post(client, tar_of(broken), token)
    assert r.status_code == 201
    assert r.json()["state"] == "rejected" and r.json()["reasons"] == local
    assert not (service.boards / "test-pinned" / "submissions").exists()


@pytest.mark.parametrize("entry", ["absolute", "dotdot", "symlink", "not tar", "gzip"])
def test_hostile_archives_are_refused_with_one_line(entry: str, service: Service, client: Any,
                                                    tmp_path: Path) -> None:
    import io
    import tarfile

    token = service.add_token("alice")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo({"absolute": "/etc/x.json", "dotdot": "../x.json", "symlink": "model.json",
                                "not tar": "x", "gzip": "x"}[entry])
        if entry == "symlink":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(info, io.BytesIO(b""))
    body = b"plain bytes, not an archive" if entry == "not tar" else buf.getvalue()
    if entry == "gzip":  # compressed archives are refused: a small upload could unpack to any size
        import gzip

        body = gzip.compress(tar_of(tmp_path))
    r = _post(client, body, token)
    assert r.status_code == 400 and r.json()["detail"].startswith("rejected: ")
    assert "\n" not in r.json()["detail"]
    assert not (tmp_path / "etc").exists() and not (service.boards.parent / "x.json").exists()
    assert list((service.boards / ".serve-work").iterdir()) == []


def test_another_submitters_model_is_403(service: Service, client: Any, bundles: dict[str, Path]) -> None:
    alice, bob = service.add_token("alice"), service.add_token("bob")
    first = _post(client, tar_of(bundles["a"]), alice)
    assert first.status_code == 201
    r = _post(client, tar_of(bundles["a2"]), bob)  # the same model name, a new revision
    assert r.status_code == 403 and "belongs to another submitter" in r.json()["detail"]
    w = client.post(f"/api/submissions/{first.json()['id']}/withdraw", json={"reason": "mine now"},
                    headers=auth(bob))
    assert w.status_code == 403
    assert _post(client, tar_of(bundles["a2"]), alice).status_code == 201  # its owner may add a revision


def test_upload_over_the_cap_is_413_and_leaves_nothing(tmp_path: Path, clock: Clock, bundles: dict[str, Path]
                                                       ) -> None:
    from fastapi.testclient import TestClient

    from fairmedbench.serve.app import asgi

    service = Service(tmp_path / "boards", settings=Settings(max_upload=4096), now=clock)
    client = TestClient(asgi(service))
    token = service.add_token("alice")
    body = tar_of(bundles["a"])
    assert len(body) > 4096
    r = _post(client, body, token)  # Content-Length above the cap: refused before the body is read
    assert r.status_code == 413 and "4096" in r.json()["detail"]
    chunks = iter([body[i:i + 1024] for i in range(0, len(body), 1024)])  # no Content-Length: counted as it streams
    r = client.post("/api/submissions", content=chunks, headers=auth(token))
    assert r.status_code == 413
    assert service.submissions_of() == [] and list((service.boards / ".serve-work").iterdir()) == []


def test_daily_cap_is_429_until_a_day_has_passed(service: Service, client: Any, clock: Clock, suite: Suite,
                                                 tmp_path: Path) -> None:
    token = service.add_token("alice")
    for k in range(5):
        r = _post(client, _header_only(tmp_path, suite, revision=f"r{k}"), token)
        assert r.status_code == 201 and r.json()["state"] == "rejected"
    r = _post(client, _header_only(tmp_path, suite, revision="r5"), token)
    assert r.status_code == 429 and "cap is 5" in r.json()["detail"]
    clock.advance(DAY + 1)
    assert _post(client, _header_only(tmp_path, suite, revision="r6"), token).status_code == 201


def test_full_queue_is_503(tmp_path: Path, clock: Clock, bundles: dict[str, Path]) -> None:
    from fastapi.testclient import TestClient

    from fairmedbench.serve.app import asgi

    service = Service(tmp_path / "boards", settings=Settings(max_queue=1), now=clock)
    client = TestClient(asgi(service))
    token = service.add_token("alice")
    assert _post(client, tar_of(bundles["a"]), token).json()["state"] == "queued"
    r = _post(client, tar_of(bundles["b"]), token)
    assert r.status_code == 503 and "queue is full" in r.json()["detail"]


def test_sql_metacharacters_in_every_field_are_data(service: Service, client: Any, suite: Suite,
                                                    tmp_path: Path) -> None:
    evil = "x'); DROP TABLE submissions; --"
    with pytest.raises(InputError, match="submitter name"):
        service.add_token(evil)
    token = service.add_token("alice", maintainer=True)
    r = _post(client, _header_only(tmp_path, suite, name=evil, revision="' OR '1'='1"), token)
    assert r.status_code == 201 and r.json()["model"] == evil and r.json()["state"] == "rejected"
    assert any("model name" in line for line in r.json()["reasons"])
    assert _post(client, b"x", token, board="' OR 1=1 --").status_code == 400
    assert client.get("/api/submissions/' OR '1'='1").status_code == 404
    assert client.get("/boards/'; DROP TABLE audit; --").status_code == 404
    w = client.post(f"/api/submissions/{r.json()['id']}/withdraw", json={"reason": evil}, headers=auth(token))
    assert w.status_code == 200 and evil in w.json()["withdrawn_reason"]
    with service.engine.connect() as conn:
        names = set(sa.inspect(conn).get_table_names())
        assert {"submissions", "audit", "submitters"} <= names
        assert conn.execute(sa.select(sa.func.count()).select_from(db.submissions)).scalar_one() == 1


def test_script_bearing_names_and_cards_are_escaped_under_a_csp(service: Service, client: Any, suite: Suite,
                                                                bundles: dict[str, Path], tmp_path: Path) -> None:
    token = service.add_token("alice")
    ok = _post(client, tar_of(bundles["xss"]), token)
    assert ok.json()["state"] == "queued"
    bad = _post(client, _header_only(tmp_path, suite, name="<script>alert(1)</script>"), token)
    pages = {"/": client.get("/"), "/boards/test-pinned": client.get("/boards/test-pinned"),
             "sub ok": client.get(f"/submissions/{ok.json()['id']}"),
             "sub bad": client.get(f"/submissions/{bad.json()['id']}"), "404": client.get("/boards/nope"),
             "api": client.get("/api/boards"), "openapi": client.get("/openapi.json")}
    for where, r in pages.items():
        csp = dict(d.strip().split(" ", 1) for d in r.headers.get("content-security-policy", "").split(";"))
        assert csp["default-src"] == "'none'" and "unsafe" not in csp.get("script-src", ""), where
        assert r.headers["x-content-type-options"] == "nosniff", where
        assert "<script>alert" not in r.text and "<img src=x" not in r.text, where
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages["sub bad"].text
    assert "&lt;script&gt;alert(&#39;pwned&#39;)" in pages["/boards/test-pinned"].text
    assert "script-src 'sha256-" in pages["/boards/test-pinned"].headers["content-security-policy"]


def test_a_token_never_appears_in_logs_pages_or_the_audit_log(service: Service, client: Any,
                                                               bundles: dict[str, Path],
                                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    token = service.add_token("alice", maintainer=True)
    seen = [_post(client, tar_of(bundles["a"]), token), _post(client, b"junk", token),
            _post(client, b"junk", token[:-1] + "x")]
    sid = seen[0].json()["id"]
    seen += [client.get(p) for p in ("/", "/boards/test-pinned", f"/submissions/{sid}", "/api/queue",
                                     f"/api/submissions/{sid}", "/api/boards")]
    seen.append(client.get("/api/audit", headers=auth(token)))
    secret = tokens.TOKEN_RE.fullmatch(token).group(2)  # the secret may hold '_'
    assert any("submission" in m for m in caplog.messages)  # the server did log its submissions
    for text in [caplog.text, *(r.text for r in seen), json.dumps(service.audit_log())]:
        assert secret not in text and token not in text


def test_maintainer_withdraws_with_a_reason_shown_on_the_board_and_audited(
        service: Service, client: Any, bundles: dict[str, Path]) -> None:
    alice, boss = service.add_token("alice"), service.add_token("boss", maintainer=True)
    sid = _post(client, tar_of(bundles["a"]), alice).json()["id"]
    assert client.get("/api/audit", headers=auth(alice)).status_code == 403
    r = client.post(f"/api/submissions/{sid}/withdraw", json={"reason": "weights link is dead"}, headers=auth(boss))
    assert r.status_code == 200 and r.json()["state"] == "withdrawn" and service.queue() == []
    board = client.get("/boards/test-pinned").text
    assert "withdrawn by boss: weights link is dead" in board
    assert client.get("/api/boards/test-pinned/rows").json()["rows"] == []
    log = client.get("/api/audit", headers=auth(boss)).json()
    assert [(x["actor"], x["action"]) for x in log][:3] == [("boss", "withdraw"), ("alice", "accepted"),
                                                            ("alice", "submit")]
    assert log[0]["bundle_hash"] == r.json()["content_hash"] and log[0]["detail"] == "weights link is dead"
    with service.engine.begin() as conn, pytest.raises(sa.exc.DatabaseError, match="append-only"):
        conn.execute(db.audit.delete())


def test_index_and_openapi_list_every_route(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    assert {"/api/boards", "/api/boards/{name}/rows", "/api/submissions", "/api/submissions/{sid}",
            "/api/queue", "/boards/{name}", "/submissions/{sid}", "/"} <= set(spec["paths"])
    assert {b["name"] for b in client.get("/api/boards").json()} >= {"synthetic", "test-pinned"}
    empty = client.get("/boards/synthetic")
    assert empty.status_code == 200 and "No verified row yet" in empty.text


def test_migrations_run_once(tmp_path: Path) -> None:
    engine = db.make_engine(db.default_url(tmp_path))
    db.upgrade(engine)
    db.upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar_one() == "0001"
        assert set(sa.inspect(conn).get_table_names()) == {"alembic_version", *db.metadata.tables}


def test_the_live_board_remembers_checks_only_for_unchanged_files(service: Service, client: Any,
                                                                  bundles: dict[str, Path]) -> None:
    token = service.add_token("alice")
    assert _post(client, tar_of(bundles["a"]), token).json()["state"] == "queued"
    assert service.board_document("test-pinned")["rows"] and len(service._checked) == 1
    stored = next((service.boards / "test-pinned" / "submissions").rglob("seed0.json"))
    stored.write_text(stored.read_text().replace('"seed": 0', '"seed": 0 ', 1))  # one byte more: the seal breaks
    doc = service.board_document("test-pinned")
    assert doc["rows"] == [] and doc["refused"][0]["model"] == "m-a" and len(service._checked) == 2


def test_a_full_disk_is_one_clear_error_per_request(service: Service, client: Any, bundles: dict[str, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    token = service.add_token("alice")

    def full(*_: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Service, "ingest", full)
    r = _post(client, tar_of(bundles["a"]), token)
    assert r.status_code == 507 and r.json() == {
        "detail": "the server's disk is full; nothing was stored, try again later"}
    assert list((service.boards / ".serve-work").iterdir()) == [] and service.submissions_of() == []
    monkeypatch.undo()
    assert _post(client, tar_of(bundles["a"]), token).status_code == 201  # the server goes on answering
