"""A model lock written in a run of several hosts (roles/model/operations.py ``write_lock``):
the first host writes it on the controller, and every host that placed the same commit gets the
locked manifest, so the next run plans no change on any of them (the lab pair's second run found
the second host without it)."""

from __future__ import annotations

import json

from roles.model import operations
from roles.model.manifest import load_manifest

COMMIT = "d82abdf7541916a750ffb65637a91f4dd47bf394"
MANIFEST_FILE = "/etc/rigup/model/manifests/qwen3.6-27b-int4-autoround.json"


class Host:
    """What write_lock uses of a pyinfra host: its name, the placement's record (a fact), the
    file it puts and the lines it logs."""

    def __init__(self, name: str, record: dict):
        self.name, self.record = name, record
        self.put: dict[str, str] = {}
        self.logged: list[str] = []

    def get_fact(self, _fact, path: str):
        return self.record

    def put_file(self, src, dest: str) -> bool:
        self.put[dest] = src.read()
        return True

    def log_styled(self, text: str, **_):
        self.logged.append(text)


def _record(commit: str = COMMIT) -> dict:
    return {
        "source": "huggingface",
        "commit": commit,
        "endpoint": "http://10.77.0.1:27301",
        "placed_at": "2026-12-02T05:00:00Z",
        "files": [
            {"path": "config.json", "dest": "config.json", "size": 10, "sha256": "0" * 64},
            {
                "path": "model.safetensors",
                "dest": "model.safetensors",
                "size": 20,
                "sha256": "1" * 64,
            },
        ],
    }


def test_every_host_of_the_run_gets_the_locked_manifest(tmp_path, monkeypatch):
    monkeypatch.setattr(operations, "LOCKS_WRITTEN", [])
    manifest = load_manifest("qwen3.6-27b-int4-autoround", str(tmp_path))
    assert not manifest.locked
    lock = str(tmp_path / "qwen3.6-27b-int4-autoround.lock")
    a, b = Host("rigs-a", _record()), Host("rigs-b", _record())
    for host in (b, a):  # the order the hosts of a run finish in
        assert operations.write_lock(None, host, "/srv/x", manifest, lock, MANIFEST_FILE)
    assert a.put[MANIFEST_FILE] == b.put[MANIFEST_FILE]
    locked = json.loads(a.put[MANIFEST_FILE])
    assert COMMIT in json.dumps(locked)
    assert len(operations.LOCKS_WRITTEN) == 1 and "placed on rigs-b" in operations.LOCKS_WRITTEN[0]


def test_a_host_that_placed_another_commit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(operations, "LOCKS_WRITTEN", [])
    manifest = load_manifest("qwen3.6-27b-int4-autoround", str(tmp_path))
    lock = str(tmp_path / "qwen3.6-27b-int4-autoround.lock")
    first, moved = Host("rigs-a", _record()), Host("rigs-b", _record("e" * 40))
    assert operations.write_lock(None, first, "/srv/x", manifest, lock, MANIFEST_FILE)
    assert not operations.write_lock(None, moved, "/srv/x", manifest, lock, MANIFEST_FILE)
    assert moved.put == {}
    assert "written meanwhile" in moved.logged[-1]
