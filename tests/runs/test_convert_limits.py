"""The import door converts a file under the converting process's limits (issue 35, part C): N17Q_CONVERT_MEMORY_MB
and N17Q_CONVERT_CPU_S reach that process, and reaching either, or a converter's own caps, is a one-line refusal
with nothing stored. Settings are lowered here so that small files reach them."""

from __future__ import annotations

from pathlib import Path

import pytest

from runs.models import Blob, Run
from tests.engine.test_inspect_bounds import eval_log, sample_of
from tests.runs.test_import_formats import refusal

pytestmark = pytest.mark.django_db


def test_an_amplifying_eval_upload_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bomb.eval"
    path.write_bytes(eval_log([sample_of(0, b"{}", 20_000_000)]))
    message = refusal(path)
    assert "holds up to" in message and "JSON values" in message
    assert Run.objects.count() == 0 and Blob.objects.count() == 0


def test_the_converting_process_runs_under_the_memory_limit_of_the_settings(tmp_path: Path, settings) -> None:
    settings.N17Q_CONVERT_MEMORY_MB = 150
    path = tmp_path / "big.eval"
    path.write_bytes(eval_log([sample_of(0, b'{"event": "model", "input": [{}, {}, {}]}', 400_000)]))
    message = refusal(path)
    assert "the conversion needs more memory than the 150 MiB it may use" in message
    assert Run.objects.count() == 0 and Blob.objects.count() == 0


def test_the_converting_process_runs_under_the_cpu_limit_of_the_settings(tmp_path: Path, settings) -> None:
    settings.N17Q_CONVERT_CPU_S = 1
    pool = b'{"role": "user", "content": "' + b"x" * 20 + b'"}'
    sample = (
        b'{"id": 0, "epoch": 1, "events_data": {"messages": ['
        + b",".join([pool] * 2_000)
        + b']}, "events": ['
        + b",".join([b'{"event": "model", "input_refs": [[0, 2000]]}'] * 2_000)
        + b"]}"
    )
    path = tmp_path / "slow.eval"
    path.write_bytes(eval_log([sample]))
    message = refusal(path)
    assert "the conversion used more than the 1 s of CPU time it may use" in message
    assert Run.objects.count() == 0 and Blob.objects.count() == 0
