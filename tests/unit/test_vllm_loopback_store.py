"""files/vllm/sitecustomize.py: in vllm.service's processes, the torch.distributed store that
rank 0 hosts for a loopback init method listens on that address only.

torch is not on the controller: a package of the same module path stands in for
``torch.distributed.rendezvous`` (its ``_create_c10d_store`` and ``TCPStore`` record what they
are given), so the import hook, the wrap and the real socket it binds are what is tested here;
the lab's socket listing (tests/infra/test_hardening.py) proves it with torch 2.11 itself.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

FILES = Path(__file__).resolve().parents[2] / "files" / "vllm"

RENDEZVOUS = """
import socket

def _torchelastic_use_agent_store():
    import os
    return os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"

class TCPStore:
    def __init__(self, **kwargs):
        fd = kwargs.pop("master_listen_fd", None)
        self.kwargs = kwargs
        self.listening = None
        if fd is not None:
            s = socket.socket(fileno=fd)
            self.listening = list(s.getsockname()[:2])
            self.accepting = s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN) == 1
            s.close()

def _create_c10d_store(hostname, port, rank, world_size, timeout, use_libuv=True):
    return ("torch's own", hostname, port, rank)
"""

PROBE = """
import json, sys
assert "torch.distributed.rendezvous" not in sys.modules  # nothing imported at start-up
from torch.distributed import rendezvous as r
out = {}
for case, host, rank in [("loopback", "127.0.0.1", 0), ("localhost", "localhost", 0),
                         ("other rank", "127.0.0.1", 1), ("other host", "10.1.2.3", 0)]:
    store = r._create_c10d_store(host, PORT, rank, 2, 30)
    out[case] = store if isinstance(store, tuple) else {
        "listening": store.listening, "accepting": store.accepting, "kwargs": store.kwargs}
print(json.dumps(out, default=str))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def fake_torch(tmp_path) -> Path:
    pkg = tmp_path / "torch" / "distributed"
    pkg.mkdir(parents=True)
    (tmp_path / "torch" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "rendezvous.py").write_text(RENDEZVOUS)
    return tmp_path


def _run(fake_torch: Path, **env: str) -> dict:
    port = _free_port()
    proc = subprocess.run(
        [sys.executable, "-c", PROBE.replace("PORT", str(port))],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{FILES}:{fake_torch}", **env},
        check=True,
    )
    out = json.loads(proc.stdout)
    out["port"] = port
    return out


def test_rank_zero_store_for_a_loopback_host_listens_on_it_only(fake_torch):
    out = _run(fake_torch)
    port = out["port"]
    for case in ("loopback", "localhost"):
        assert out[case]["listening"] == ["127.0.0.1", port], out[case]
        assert out[case]["accepting"] is True
        kwargs = out[case]["kwargs"]
        assert kwargs["is_master"] is True and kwargs["port"] == port
        assert kwargs["multi_tenant"] is True and kwargs["world_size"] == 2


def test_other_ranks_hosts_and_the_agent_store_go_to_torch_as_they_are(fake_torch):
    out = _run(fake_torch)
    assert out["other rank"] == ["torch's own", "127.0.0.1", out["port"], 1]
    assert out["other host"] == ["torch's own", "10.1.2.3", out["port"], 0]
    agent = _run(fake_torch, TORCHELASTIC_USE_AGENT_STORE="True")
    assert agent["loopback"] == ["torch's own", "127.0.0.1", agent["port"], 0]


def test_a_taken_port_is_torchs_error_kind():
    """The port vLLM picked is taken by the time the store binds: OSError, as torch's own bind
    fails (vLLM reports it and the unit restarts)."""
    spec = importlib.util.spec_from_file_location("rigup_sitecustomize", FILES / "sitecustomize.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hook._WrapOnImport)]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            hook.loopback_listener("127.0.0.1", taken.getsockname()[1])
