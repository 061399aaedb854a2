"""benchmarks/gpu-serve's RUNBOOK tooling on the H200 runs' real records
(tests/fixtures/vllm-cuda/h200-runs*): a mistyped ``--have`` is refused before anything is
fetched, the records come back packed within the device's limits, the length ``--fit`` served
is recorded for the next start, and the summary carries MTP acceptance as /metrics and vLLM's
log show it."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import io
import json
import shutil
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GPU_SERVE = REPO / "benchmarks" / "gpu-serve"
RUNS = REPO / "tests" / "fixtures" / "vllm-cuda"
DAY1, DAY2 = RUNS / "h200-runs", RUNS / "h200-runs-2026-12-02"

import sys  # noqa: E402

sys.path.insert(0, str(GPU_SERVE))
from gpuserve import records, steps  # noqa: E402

from rigup import metrics  # noqa: E402


def _cli():
    loader = importlib.machinery.SourceFileLoader("gpu_serve_cli", str(GPU_SERVE / "gpu-serve"))
    spec = importlib.util.spec_from_loader("gpu_serve_cli", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


# --- wheelhouse --have ---------------------------------------------------------------------------


def test_a_have_directory_that_does_not_exist_is_refused_before_any_download(tmp_path, capsys):
    have = tmp_path / "wheels"
    have.mkdir()
    code = _cli().main(
        ["wheelhouse", "--image", "nvidia-h200", "--have", str(have),
         "--have", str(tmp_path / "whels"), "--have", str(tmp_path / "also-not"),
         "--download", str(tmp_path / "dl"), "--out", str(tmp_path / "pieces")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert f"--have: no such directory: {tmp_path / 'whels'}, {tmp_path / 'also-not'}" in err
    assert str(have) + "," not in err  # the one that exists is not named
    assert not (tmp_path / "dl").exists() and not (tmp_path / "pieces").exists()


# --- pack ----------------------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_a_calls_runs_come_back_as_one_tar_within_the_devices_limits(tmp_path):
    runs = [DAY1 / "full-mtp", DAY1 / "full-nomtp"]
    out = tmp_path / "OUT" / "step5.tar.gz"
    (piece,) = records.pack(runs, out)
    assert piece["file"] == str(out) and piece["bytes"] == out.stat().st_size
    assert piece["bytes"] <= records.MAX_FILE_BYTES
    assert piece["sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    with tarfile.open(out) as tar:
        tar.extractall(tmp_path / "back", filter="data")
    for run in runs:
        assert _tree(tmp_path / "back" / run.name) == _tree(run)  # every record, byte for byte
    assert [p.relative_to(tmp_path / "OUT") for p in (tmp_path / "OUT").rglob("*")] == [
        Path("step5.tar.gz")
    ]


def test_a_pack_larger_than_a_file_may_be_is_cut_and_joins_back(tmp_path):
    out = tmp_path / "step3.tar.gz"
    pieces = records.pack([DAY2 / "tiny32-eager"], out, max_bytes=3000)
    assert len(pieces) > 1 and all(p["bytes"] <= 3000 for p in pieces)
    assert [Path(p["file"]).name for p in pieces][:2] == ["step3.tar.gz.000", "step3.tar.gz.001"]
    joined = b"".join(Path(p["file"]).read_bytes() for p in pieces)
    with tarfile.open(fileobj=io.BytesIO(joined)) as tar:
        assert "tiny32-eager/engine.log" in tar.getnames()


def test_more_pieces_than_come_back_and_missing_runs_are_refused_writing_nothing(tmp_path):
    with pytest.raises(records.RecordsError, match="the device hands back 8 files"):
        records.pack([DAY1 / "full-mtp"], tmp_path / "x.tar.gz", max_bytes=1000)
    with pytest.raises(records.RecordsError, match="nope, .*nada"):
        records.pack([DAY1 / "full-mtp", tmp_path / "nope", tmp_path / "nada"], tmp_path / "y")
    assert list(tmp_path.iterdir()) == []


# --- the length --fit served ---------------------------------------------------------------------


def test_the_length_fit_served_is_what_the_next_start_takes(tmp_path, capsys):
    """The 2026-12-01 full-size run asked 262144, was refused, and served at vLLM's estimate
    56000: served.json says 56000 and ``--max-model-len-of`` renders the next start with it."""
    run = tmp_path / "full-mtp"
    shutil.copytree(DAY1 / "full-mtp", run)
    record = json.loads((run / "engine.json").read_text())
    assert steps.record_served(run, record) == {
        "max_model_len": 56000, "tensor_parallel_size": 1, "memory_gib": 24.0, "mtp": True
    }  # fmt: skip
    assert steps.served_max_model_len(run) == 56000
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    code = _cli().main(
        ["render", "--model", str(model), "--max-model-len-of", str(run), "--no-mtp"]
    )
    argv = json.loads(capsys.readouterr().out)["argv"]
    assert code == 0 and argv[argv.index("--max-model-len") + 1] == "56000"


def test_a_run_that_never_served_gives_no_length(tmp_path, capsys):
    run = tmp_path / "refused"
    run.mkdir()
    with pytest.raises(ValueError, match="no served.json there .*never answered /health"):
        steps.served_max_model_len(run)
    code = _cli().main(["render", "--model", str(tmp_path), "--max-model-len-of", str(run)])
    assert code == 2 and "--max-model-len-of" in capsys.readouterr().err


# --- MTP acceptance ------------------------------------------------------------------------------


def test_vllms_logged_acceptance_is_summed_from_its_own_lines():
    tiny = metrics.logged_acceptance((DAY1 / "tiny-eager" / "engine.log").read_text())
    assert tiny == {"rate": 1.0, "draft_tokens": 6, "accepted": 6, "lines": 1}
    full = metrics.logged_acceptance((DAY2 / "full-mtp" / "engine.log").read_text())
    assert full == {"rate": 0.0, "draft_tokens": 129, "accepted": 0, "lines": 1}
    # the shipped tiny model's runs of 2026-12-02 ended before vLLM's 10 s stats line
    assert metrics.logged_acceptance((DAY2 / "tiny32-eager" / "engine.log").read_text()) is None
    assert metrics.logged_acceptance((DAY2 / "tiny32-graphs" / "engine.log").read_text()) is None


def test_the_summary_file_carries_acceptance_from_metrics_and_the_log(tmp_path):
    """summary.json itself (not only what is printed) holds ``mtp_acceptance``: the /metrics
    answer the CUDA-graph run gave (5 drafts, 15 of 15 tokens) and the log's own line."""
    run = tmp_path / "tiny-eager"
    shutil.copytree(DAY1 / "tiny-eager", run)
    scraped = steps.acceptance_of((RUNS / "metrics-excerpt-cudagraphs.txt").read_text(), run)
    assert (scraped["drafts"], scraped["draft_tokens"], scraped["accepted"]) == (5, 15, 15)
    steps.summary(run, True, 1.0, "", [], scraped)
    saved = json.loads((run / "summary.json").read_text())["mtp_acceptance"]
    assert saved["metrics"]["rate"] == 1.0 and saved["metrics"]["mean_length"] == 4.0
    assert saved["log"] == {"rate": 1.0, "draft_tokens": 6, "accepted": 6, "lines": 1}


def test_no_draft_in_metrics_shows_the_counters_not_null(tmp_path):
    text = "\n".join(
        line.rsplit(" ", 1)[0] + " 0.0" if line.startswith("vllm:spec_decode_num_") else line
        for line in (RUNS / "metrics-excerpt-cudagraphs.txt").read_text().splitlines()
        if "_created" not in line
    )
    assert steps.acceptance_of(text, tmp_path) == {
        "drafts": 0.0, "draft_tokens": 0.0, "accepted": 0.0
    }  # fmt: skip
    no_spec = "\n".join(
        line for line in text.splitlines() if not line.startswith("vllm:spec_decode")
    )
    assert steps.acceptance_of(no_spec, tmp_path) == {
        "drafts": None, "draft_tokens": None, "accepted": None
    }  # fmt: skip


def test_without_mtp_the_summary_has_no_acceptance(tmp_path):
    run = tmp_path / "full-nomtp"
    shutil.copytree(DAY2 / "full-nomtp", run)
    assert "mtp_acceptance" not in steps.summary(run, True, 1.0, "", [], None)
