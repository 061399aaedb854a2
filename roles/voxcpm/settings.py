"""Rules for the VoxCPM2 role's settings (inventory/group_data/all.py, "VoxCPM2")."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roles.common.checks import (
    ENV_NAME,
    SAFE_NAME,
    UNIX_NAME,
    Check,
    boolean,
    host_address,
    integer,
    location_or_empty,
    matches,
    number,
    service_port,
)
from roles.common.locks import version_check
from roles.common.setting import (
    Setting,
    TypedSettings,
    declared,
    optional,
    rules,
    setting,
)
from roles.model.settings import manifest_ref

FILES = Path(__file__).resolve().parents[2] / "files" / "voxcpm"
LOCK = FILES / "requirements.lock"
SERVER = FILES / "voxcpm_server.py"
#: The speech server's modules, installed beside it (files/voxcpm): file -> what it holds.
SERVER_MODULES = {
    "voxcpm_api.py": "request and error shapes, voices",
    "voxcpm_synth.py": "synthesizers",
    "voxcpm_audio.py": "audio encoding",
    "voxcpm_stream.py": "streamed answers",
    "voxcpm_memory.py": "release and reload of the model",
}
#: the server and its modules
SERVER_PARTS = (SERVER, *(FILES / name for name in SERVER_MODULES))


def server_constant(name: str) -> Any:
    """A constant of the speech server (files/voxcpm/voxcpm_server.py or the modules beside it),
    read without importing them (they need the service venv): a literal, or the pattern of a
    ``re.compile(...)``. Raises LookupError when none of them assigns ``name``."""
    for path in SERVER_PARTS:
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == name for t in node.targets
            ):
                value = node.value
                if isinstance(value, ast.Call):
                    return re.compile(ast.literal_eval(value.args[0]))
                return ast.literal_eval(value)
    raise LookupError(f"{SERVER} and the modules beside it define no {name}")


#: The voice names of OpenAI's speech API and a voice name, as the server knows them.
OPENAI_VOICES: tuple[str, ...] = server_constant("OPENAI_VOICES")
VOICE_NAME: re.Pattern[str] = server_constant("VOICE_NAME")


def voice_aliases(value: Any) -> str | None:
    """``{"alloy": "narrator", ...}``: keys among OpenAI's voice names, values "default" or the
    name of a recording ``<name>.wav`` in the voices directory."""
    if not isinstance(value, Mapping):
        return f"must be a dict of OpenAI voice name -> voice name, got {value!r}"
    problems = []
    for name, voice in value.items():
        if name not in OPENAI_VOICES:
            problems.append(
                f"{name!r} is not one of OpenAI's voice names ({', '.join(OPENAI_VOICES)})"
            )
        elif not isinstance(voice, str) or not VOICE_NAME.match(voice):
            problems.append(
                f"{name!r} maps to {voice!r}: give 'default' or the name of a recording "
                "<name>.wav in the voices directory (letters, digits, '_' and '-')"
            )
    return "; ".join(problems) or None


@dataclass(frozen=True)
class VoxcpmSettings(TypedSettings):
    """The VoxCPM2 role's settings, each declared once: name, the type code reads, check.
    Defaults, meaning and sources: inventory/group_data/all.py ("VoxCPM2").
    ``VoxcpmSettings.of(host.data)`` reads them into typed attributes."""

    voxcpm_install: bool = setting(boolean)
    voxcpm_python_version: str = setting(
        matches(
            re.compile(r"^3\.(11|12)\.\d+$"),
            "an exact CPython 3.11.x-3.12.x release such as 3.12.16 (voxcpm 2.0.3 supports 3.10-3.12; "
            "its lock needs 3.11 or later: fastapi 0.165.0 and av 18.1.0)",
        )
    )
    voxcpm_python_install_mirror: str = setting(location_or_empty(paths=False))
    voxcpm_python_downloads_json: str = setting(location_or_empty(paths=True))
    voxcpm_version: str = setting(version_check(LOCK, "voxcpm", "voxcpm_version"))
    voxcpm_user: str = setting(matches(UNIX_NAME, "a Unix user name (lowercase, max 32 chars)"))
    voxcpm_host: str = setting(host_address)
    voxcpm_api_key_env: str = setting(
        matches(ENV_NAME, "an environment variable name such as VOXCPM_API_KEY")
    )
    voxcpm_port: int = setting(service_port)
    voxcpm_served_model_name: str = setting(
        matches(SAFE_NAME, "a name of letters, digits, '.', '_' and '-'")
    )
    voxcpm_voice_aliases: Mapping[str, str] = setting(voice_aliases)
    voxcpm_model_manifest: str = setting(manifest_ref)
    voxcpm_gpu_index: int = setting(integer(0, 15))
    voxcpm_vram_gib: float = setting(number(0.0, 1024.0, lo_open=True))
    voxcpm_cfg_value: float = setting(number(0.0, 20.0, lo_open=True))
    voxcpm_inference_timesteps: int = setting(integer(1, 1000))
    voxcpm_torch_compile: bool = setting(boolean)
    voxcpm_start_timeout_s: int = setting(integer(30, 24 * 3600))
    voxcpm_test_double_synthesizer: bool = setting(boolean)


SETTINGS: tuple[Setting, ...] = declared(VoxcpmSettings)

RULES: dict[str, Check] = rules(SETTINGS)
OPTIONAL: tuple[str, ...] = optional(SETTINGS)


def consistency(values: Mapping[str, Any]) -> list[str]:
    """Rules over several VoxCPM2 keys (none yet)."""
    return []
