"""Run bundles pass the secret scan on import (issue 13, point 5): what it finds in the manifest's run, an event or a
blob is masked before anything is stored, shown on the run page, and absent from every package built from the run.

Tokens are assembled at run time from the providers' documented formats, so none sits whole in the repository.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import string
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import storages
from django.urls import reverse

from n17q_engine.bundle import BundleError
from replays import services as replays
from runs.importer import run_import_from_path
from runs.models import Blob, Event, MaskedSecret, Run, RunBlob, blob_storage_name
from tests import bundles

pytestmark = pytest.mark.django_db

ALNUM = string.ascii_letters + string.digits


def _token(prefix: str, n: int) -> str:
    return prefix + "".join(secrets.choice(ALNUM) for _ in range(n))


def _pieces(secret: str, skip: int) -> list[str]:
    """Every 8-character piece of a secret past its public prefix: none may be stored anywhere."""
    return [secret[i : i + 8] for i in range(skip, len(secret) - 7)]


def _bundle_with_secrets(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    manifest, events, blobs = bundles.example_parts()
    github = _token("ghp_", 36)
    slack = "xoxb-" + "".join(secrets.choice(string.digits) for _ in range(12)) + "-" + _token("", 24)
    stripe = _token("sk_" + "live_", 30)
    npm = _token("npm_", 36)
    # In a tool call's arguments, in a command's text, in a tool result's JSON blob, in the run's title.
    call = next(e for e in events if e["kind"] == "tool.call")
    call["request"]["note"] = f"token {github} from the harness"
    result = next(e for e in events if e["kind"] == "tool.result" and e.get("blob"))
    old_digest = result["blob"]
    document = json.loads(blobs[old_digest])
    document["debug"] = {"auth": f"Authorization: Bearer {slack}"}
    blobs, new_digest = bundles.with_blob(blobs, json.dumps(document).encode())
    manifest["blobs"][new_digest] = {**manifest["blobs"].pop(old_digest), "size": len(blobs[new_digest])}
    del blobs[old_digest]
    result["blob"] = new_digest
    manifest["run"]["title"] = f"docs run with {stripe}"
    last = events[-1]
    last_at = last["at"]
    events.append(
        {
            "seq": last["seq"] + 1,
            "id": "e-note",
            "kind": "run.state",
            "at": last_at,
            "attempt": last.get("attempt"),
            "state": "completed",
            "reason": f"npm publish with {npm} done",
            # A converter's provenance names blobs outside the vocabulary's blob fields (otlp.blob, …).
            "provenance": {"raw": [new_digest]},
        }
    )
    folder = bundles.write_folder(tmp_path / "bundle", manifest, events, blobs)
    return folder, {"github": github, "slack": slack, "stripe": stripe, "npm": npm, "recorded_blob": new_digest}


def _everything_stored(run: Run) -> str:
    store = storages["blobs"]
    parts = [json.dumps(run.manifest_run), run.bundle_digest]
    parts += [json.dumps(body) for body in Event.objects.filter(run=run).values_list("body", flat=True)]
    for rb in RunBlob.objects.filter(run=run).select_related("blob"):
        with store.open(blob_storage_name(rb.blob.digest), "rb") as fh:
            parts.append(fh.read().decode("utf-8", "replace"))
    parts += [f"{m.path} {m.preview} {m.recorded_as}" for m in MaskedSecret.objects.filter(run=run)]
    return "\n".join(parts)


def test_secrets_in_a_bundle_are_masked_before_storing_and_nothing_of_them_is_kept(tmp_path):
    folder, found = _bundle_with_secrets(tmp_path)
    result = run_import_from_path(folder)
    run = result.run
    stored = _everything_stored(run)
    for name, prefix in (("github", 4), ("slack", 5), ("stripe", 8), ("npm", 4)):
        assert not any(p in stored for p in _pieces(found[name], prefix)), name
    rows = {(m.place, m.rule) for m in MaskedSecret.objects.filter(run=run)}
    assert ("event", "github-pat") in rows and ("manifest", "stripe-access-token") in rows
    assert ("event", "npm-access-token") in rows and any(place == "blob" for place, _ in rows)
    assert run.masked_secret_count == len(result.masked_secrets) == MaskedSecret.objects.filter(run=run).count()
    assert "[masked:github-pat]" in json.dumps(Event.objects.get(run=run, event_id="e-call1").body)
    # A digest of bytes that held a secret is kept keyed, never plain.
    assert run.bundle_digest.startswith("hmac:")


def test_a_masked_blob_is_stored_under_its_own_digest_and_every_reference_follows_it(tmp_path):
    folder, found = _bundle_with_secrets(tmp_path)
    run = run_import_from_path(folder).run
    recorded = found["recorded_blob"]
    stored_digest = next(
        e.body["blob"] for e in Event.objects.filter(run=run, kind="tool.result").order_by("seq") if e.body.get("blob")
    )
    assert stored_digest != recorded
    assert not Blob.objects.filter(digest=recorded).exists()
    assert RunBlob.objects.filter(run=run, blob__digest=stored_digest).exists()
    with storages["blobs"].open(blob_storage_name(stored_digest), "rb") as fh:
        data = fh.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == stored_digest
    assert "[masked:" in data.decode()
    masked = MaskedSecret.objects.get(run=run, place="blob")
    assert masked.blob_digest == stored_digest and masked.recorded_as.startswith("hmac:")
    assert recorded not in _everything_stored(run)
    # Every place that named the blob follows it, the fields the vocabulary does not know too.
    assert Event.objects.get(run=run, event_id="e-note").body["provenance"] == {"raw": [stored_digest]}


def test_a_package_built_from_the_run_never_contains_the_secrets(tmp_path):
    folder, found = _bundle_with_secrets(tmp_path)
    run = run_import_from_path(folder).run
    manifest, events, blobs, _expired = replays._source(run)
    packaged = json.dumps(manifest) + events.decode() + "".join(b.decode("utf-8", "replace") for b in blobs.values())
    for name, prefix in (("github", 4), ("slack", 5), ("stripe", 8), ("npm", 4)):
        assert not any(p in packaged for p in _pieces(found[name], prefix)), name
    # The package's blobs are the stored ones, under the digests the events name.
    names = {e["blob"] for e in map(json.loads, events.decode().splitlines()) if e.get("blob")}
    assert names <= set(blobs) and all(
        "sha256:" + hashlib.sha256(data).hexdigest() == digest for digest, data in blobs.items()
    )


def test_the_run_page_shows_what_was_masked_and_never_the_value(tmp_path, role_user, client):
    folder, found = _bundle_with_secrets(tmp_path)
    run = run_import_from_path(folder).run
    client.force_login(role_user("viewer"))
    html = client.get(reverse("runs:run-detail", args=[run.run_id])).content.decode()
    assert "Secrets masked on import" in html and "github-pat" in html and "events[" in html
    for name, prefix in (("github", 4), ("stripe", 8), ("npm", 4)):
        assert not any(p in html for p in _pieces(found[name], prefix)), name


def test_a_secret_in_an_id_refuses_the_import_and_stores_nothing(tmp_path):
    manifest, events, blobs = bundles.example_parts()
    token = _token("ghp_", 36)
    call = next(e for e in events if e["kind"] == "tool.call")
    old = call["id"]
    call["id"] = token
    for e in events:
        for key, value in list(e.items()):
            if value == old:
                e[key] = token
    folder = bundles.write_folder(tmp_path / "bundle", manifest, events, blobs)
    with pytest.raises(BundleError) as refused:
        run_import_from_path(folder)
    message = str(refused.value)
    assert "line" in message and "secret scan" in message and token[4:] not in message
    assert not Run.objects.exists() and not Blob.objects.exists()


def test_a_bundle_without_secrets_is_stored_as_it_came(tmp_path):
    result = run_import_from_path(bundles.EXAMPLE)
    assert result.masked_secrets == [] and result.run.masked_secret_count == 0
    assert result.run.bundle_digest.startswith("sha256:")
    first = (bundles.EXAMPLE / "events.jsonl").read_text().splitlines()[0]
    assert Event.objects.get(run=result.run, seq=1).body == json.loads(first)


def _many_events_with_a_secret_every(n: int, every: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    manifest, events, _ = bundles.example_parts()
    base = events[0]
    out = [base]
    tokens = []
    for i in range(1, n):
        note = f"step {i}"
        if i % every == 0:
            tokens.append(_token("ghp_", 36))
            note += f" with {tokens[-1]}"
        out.append(
            {
                "seq": i + 1,
                "id": f"e-{i}",
                "kind": "run.state",
                "at": base["at"],
                "attempt": base["attempt"],
                "state": "running",
                "reason": note,
            }
        )
    manifest["blobs"] = {}
    manifest["tokens"] = tokens  # read back by the test; not a field of the manifest the importer keeps
    return manifest, out


def test_secrets_across_many_scan_chunks_are_each_masked_in_their_own_event(tmp_path, monkeypatch):
    from n17q_secrets import events_check

    monkeypatch.setattr(events_check, "SCAN_CHUNK_BYTES", 2048)  # many chunks, so the scanner's lines are numbered
    manifest, events = _many_events_with_a_secret_every(600, 37)
    tokens = manifest.pop("tokens")
    folder = bundles.write_folder(tmp_path / "bundle", manifest, events, {})
    run = run_import_from_path(folder).run
    stored = _everything_stored(run)
    assert not any(t[4:12] in stored for t in tokens)
    masked_events = set(MaskedSecret.objects.filter(run=run).values_list("event_ref", flat=True))
    assert masked_events == {f"e-{i}" for i in range(37, 600, 37)}


def test_a_blob_the_store_already_holds_is_not_scanned_again(tmp_path, monkeypatch):
    # A converted file's runs all keep the same original; each import scanned it whole again (ten traces of one
    # OTLP file: ten scans of the file). Bytes stored under their own digest were scanned clean on their way in.
    from runs import secret_scan

    manifest, events, blobs = bundles.example_parts()
    run_import_from_path(bundles.write_folder(tmp_path / "first", manifest, events, blobs))
    scanned: list[int] = []
    real = secret_scan._mask_blob_bytes
    monkeypatch.setattr(secret_scan, "_mask_blob_bytes", lambda raw, *a: scanned.append(len(raw)) or real(raw, *a))
    manifest["run"]["id"] = "run-example-again"
    extra = json.dumps({"fresh": "bytes nobody stored"}).encode()
    blobs, digest = bundles.with_blob(blobs, extra)
    manifest["blobs"][digest] = {
        "media_type": "application/json",
        "size": len(extra),
        "role": "tool-output",
        "retention": "standard",
    }
    second = run_import_from_path(bundles.write_folder(tmp_path / "second", manifest, events, blobs)).run
    assert scanned == [len(extra)]  # only the new blob
    assert RunBlob.objects.filter(run=second).count() == len(manifest["blobs"])
