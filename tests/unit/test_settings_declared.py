"""Settings are declared once (roles/<role>/settings.py SETTINGS), documented once
(inventory/group_data/all.py), and checked as a whole: every problem of a run at once, any key
that is no setting refused whatever its name, pyinfra's own keys let through."""

import ast
import collections.abc
import dataclasses
import io
import re
import tokenize
import types
import typing
from pathlib import Path

import pytest

from roles.cluster import settings as cluster_settings
from roles.cluster.settings import CLUSTER_FLAGS
from roles.common.checks import integer
from roles.common.pyinfra_keys import UNDECLARED_CONNECTOR_KEYS, pyinfra_keys
from roles.common.setting import (
    Checked,
    Flag,
    JsonFlag,
    Marker,
    NotChecked,
    Setting,
    Switch,
    TypedSettings,
    Withheld,
    declared,
    each_rule,
    managed_flags,
    render,
)
from roles.settings import ROLE_SETTINGS, SETTINGS, validate
from roles.vllm import settings as vllm_settings
from roles.vllm.settings import VllmSettings

REPO = Path(__file__).resolve().parents[2]
ALL_PY = REPO / "inventory" / "group_data" / "all.py"


def _assignments() -> list[ast.Assign]:
    tree = ast.parse(ALL_PY.read_text(encoding="utf-8"))
    return [n for n in tree.body if isinstance(n, ast.Assign)]


# ---- one declaration, one documented default -----------------------------------------------------
def test_each_setting_is_declared_once():
    names = [s.name for s in SETTINGS]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


def test_declarations_and_the_documented_file_name_the_same_keys():
    documented = {n.targets[0].id for n in _assignments()}
    declared = {s.name for s in SETTINGS}
    assert declared - documented == set(), "declared without a default in all.py"
    assert documented - declared == set(), "set in all.py without a declaration"


def test_every_key_of_the_documented_file_has_its_comment():
    """Each assignment carries a comment on its own lines or on the line right above it."""
    source = ALL_PY.read_text(encoding="utf-8")
    comment_lines: dict[int, bool] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comment_lines[token.start[0]] = token.line.lstrip().startswith("#")
    undocumented = [
        node.targets[0].id
        for node in _assignments()
        if not any(line in comment_lines for line in range(node.lineno, node.end_lineno + 1))
        and comment_lines.get(node.lineno - 1) is not True
    ]
    assert undocumented == []


def test_role_modules_derive_rules_from_their_declarations():
    for module in ROLE_SETTINGS:
        assert module.RULES == {s.name: s.check for s in module.SETTINGS}, module.__name__
        assert module.OPTIONAL == tuple(s.name for s in module.SETTINGS if s.optional)


def test_no_computed_setting_names():
    """No f-string builds a setting's name from parts (``f"{name}_port"``): every read of a
    setting is found by searching for its name."""
    names = {s.name for s in SETTINGS}
    part = re.compile(r"\{[^{}]+\}_([a-z][a-z0-9_]*)")
    found = []
    for root in ("roles", "deploys", "files", "lab", "bin", "config.py"):
        for path in sorted((REPO / root).rglob("*.py")) if root != "config.py" else [REPO / root]:
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.JoinedStr):
                    text = ast.unparse(node)
                    for match in part.finditer(text):
                        if any(n.endswith("_" + match.group(1)) for n in names):
                            found.append(f"{path.relative_to(REPO)}:{node.lineno}: {text}")
    assert found == []


def test_service_footprints_name_declared_settings():
    """Every setting a GPU service's footprint names (roles/services.py) is declared."""
    from roles.services import SERVICES

    declared = {s.name for s in SETTINGS}
    for service in SERVICES:
        keys = service.keys
        named = {keys.user, keys.host, keys.port, keys.start_timeout_s, *service.share_keys}
        named |= {service.install_key, service.gpu_index_key, service.open_api_key} - {""}
        named |= set(service.manifest_keys)
        assert named <= declared, f"{service.name}: {sorted(named - declared)} are no settings"


# ---- every problem at once ---------------------------------------------------------------------
def test_a_type_error_hides_no_cross_key_error(settings):
    """A string port used to stop validation before the rules over several keys ran."""
    settings.update(comfyui_port="8188", vllm_tensor_parallel_size=4, vllm_block_size=True)
    problems = validate(settings)
    assert [p.split(":", 1)[0] for p in problems] == [
        "vllm_block_size",
        "comfyui_port",
        "vllm_tensor_parallel_size",
    ], problems
    assert problems[2].startswith("vllm_tensor_parallel_size: 4 is more than the 2 GPU(s)")


def test_a_rule_reading_a_bad_key_is_skipped_the_others_run(settings):
    settings.update(vllm_max_num_batched_tokens="many", vllm_enable_prefix_caching=True)
    problems = validate(settings)
    assert problems[0].startswith("vllm_max_num_batched_tokens: must be an integer")
    # the rules needing vllm_max_num_batched_tokens are skipped; prefix caching's still runs
    assert [p for p in problems if p.startswith("vllm_enable_prefix_caching: with MTP")]
    assert not [p for p in problems if p.startswith("vllm_long_prefill_token_threshold")]


def test_a_bad_release_hides_no_comfyui_host_problem(settings):
    settings.update(comfyui_release="v0.8.0 latest", comfyui_host="0.0.0.0")
    problems = validate(settings)
    assert problems[0].startswith("comfyui_release: must be a release tag"), problems
    assert problems[1].startswith("comfyui_host: 0.0.0.0 is not loopback"), problems


def test_checked_values_refuse_what_failed_its_check():
    values = Checked({"a": 1})
    assert values["a"] == 1 and values.get("a") == 1 and dict(values) == {"a": 1}
    for read in (lambda: values["b"], lambda: values.get("b", 0)):
        with pytest.raises(NotChecked):
            read()

    def reads_b(v):
        return [f"b: {v['b']}"]

    def reads_a(v):
        return [f"a: {v['a']}"]

    assert each_rule(values, (reads_b, reads_a)) == ["a: 1"]


# ---- keys that are no setting --------------------------------------------------------------------
@pytest.mark.parametrize(
    "key,meant",
    [
        ("vlm_host", "vllm_host"),
        ("vllmport", "vllm_port"),
        ("comfy_port", "comfyui_port"),
        ("gpu_count", "nvidia_gpu_count"),
        ("power_limit_w", "nvidia_power_limit_w"),
        ("ssh_prot", "ssh_port"),
        ("_sudo_usr", "_sudo_user"),
    ],
)
def test_a_key_of_any_name_that_is_no_setting_is_refused(settings, key, meant):
    settings[key] = "0.0.0.0"
    (problem,) = validate(settings)
    assert problem.startswith(f"{key}: not a rigup setting (did you mean {meant}?)"), problem


def test_a_key_like_no_setting_is_refused_without_a_guess(settings):
    settings["listen_everywhere"] = True
    assert validate(settings) == [
        "listen_everywhere: not a rigup setting; inventory/group_data/all.py lists every setting"
    ]


def test_every_key_pyinfra_reads_passes(settings):
    keys = pyinfra_keys()
    assert {"ssh_port", "ssh_user", "ssh_key", "_sudo", "_env", "docker_identifier"} <= keys
    assert validate({**settings, **{k: None for k in keys}}) == []


def test_pyinfra_connectors_read_no_key_left_out():
    """Every host data key the installed pyinfra's connectors read in their source
    (``host.data.X``, ``host_data["X"]``, a connector's ``self.data["X"]``) is one of pyinfra's keys; a
    pyinfra upgrade that reads a new one fails here, not on a user's inventory."""
    import pyinfra.connectors

    read = re.compile(
        r"host\.data\.(?:get\(\s*[\"'])?(\w+)"  # host.data.X, host.data.get("X")
        r"|(?:host_data|self\.data)\[\s*[\"'](\w+)"  # host_data["X"], self.data["X"]
        r"|self\.data\.get\(\s*[\"'](\w+)"  # self.data.get("X")
    )
    keys = set()
    for path in Path(pyinfra.connectors.__file__).parent.rglob("*.py"):
        for match in read.finditer(path.read_text(encoding="utf-8")):
            keys.add(next(g for g in match.groups() if g))
    keys -= {"get", "dict"}
    assert {"ssh_hostname", "ssh_port", "chroot_directory"} <= keys  # the search finds reads
    assert set(UNDECLARED_CONNECTOR_KEYS) <= keys, "listed keys pyinfra no longer reads"
    assert keys - pyinfra_keys() == set()


# ---- flags derived from the declarations ---------------------------------------------------------
def test_flag_kinds_render_and_manage():
    value = Flag("--port")
    assert value.render(8000) == ["--port", "8000"] and value.names() == ("--port",)
    off = Flag("--tool-call-parser", omit_off=True, lead=("--enable-auto-tool-choice",))
    assert off.render("") == [] and off.render(0) == []
    assert off.render("hermes") == ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    assert off.names() == ("--enable-auto-tool-choice", "--tool-call-parser")
    switch = Switch("--enable-prefix-caching")
    assert switch.render(True) == ["--enable-prefix-caching"]
    assert switch.render(False) == ["--no-enable-prefix-caching"]
    assert switch.names() == ("--enable-prefix-caching", "--no-enable-prefix-caching")
    js = JsonFlag("--x", sort_keys=True)
    assert js.render({"b": 1, "a": [1, 2]}) == ["--x", '{"a":[1,2],"b":1}']
    assert js.render({}) == [] and js.render(None) == []
    marker = Marker("--language-model-only", when="language_model_only")
    assert marker.render("language_model_only") == ["--language-model-only"]
    assert marker.render("strip_vision_config") == []
    assert Withheld("--api-key").render("SECRET_ENV") == []


def test_a_new_served_flag_is_one_declaration(settings):
    """Declared with its flag, a setting is rendered, in its place, and refused in extra args."""
    new = Setting("vllm_max_logprobs", integer(0, 100), flag=Flag("--max-logprobs"))
    table = (*vllm_settings.SETTINGS, new)
    settings["vllm_max_logprobs"] = 5
    assert render(table, settings)[-2:] == ["--max-logprobs", "5"]
    assert managed_flags(table)["--max-logprobs"] == "vllm_max_logprobs"
    assert "--max-logprobs" not in vllm_settings.MANAGED  # not served today: free in extra args


def test_every_managed_vllm_flag_but_the_checkpoint_is_declared():
    declared = managed_flags(vllm_settings.SETTINGS)
    # and the multi-node flags a rig of a cluster renders from its place in the cluster
    # (roles/cluster/member.py ``ClusterMember.vllm_args``), each from declared settings
    assert set(vllm_settings.MANAGED) - set(declared) == {"--model", *CLUSTER_FLAGS}
    keys = {v.split()[0] for v in CLUSTER_FLAGS.values()}
    assert keys <= {s.name for s in cluster_settings.SETTINGS}
    assert set(vllm_settings.ALIASES.values()) <= set(declared) | set(CLUSTER_FLAGS)


# ---- typed reads ---------------------------------------------------------------------------------
def _conforms(value, hint) -> bool:
    """``value`` is of the annotation ``hint`` (the few forms settings classes use)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is typing.Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is collections.abc.Mapping:
        return isinstance(value, collections.abc.Mapping) and all(
            _conforms(k, args[0]) and _conforms(v, args[1]) for k, v in value.items()
        )
    return isinstance(value, hint)


def _typed_class(module) -> type:
    (cls,) = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, TypedSettings) and v.__module__ == module.__name__
    ]
    return cls


def _wrong(hint):
    """A value of another type than the annotation ``hint``."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return _wrong(typing.get_args(hint)[0])
    if origin is list:
        return "x"
    if origin is collections.abc.Mapping:
        return ["x"]
    return {int: "8", float: "0.5", bool: 1, str: 8}[hint]


@pytest.mark.parametrize("module", ROLE_SETTINGS, ids=lambda m: m.__name__)
def test_typed_settings_agree_with_their_checks(settings, module):
    """Each role declares its settings as one typed class; each field's annotation fits the
    shipped value, and its check refuses a value of another type."""
    cls = _typed_class(module)
    assert declared(cls) == module.SETTINGS
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        assert _conforms(settings[f.name], hints[f.name]), (f.name, settings[f.name])
        wrong = _wrong(hints[f.name])
        assert module.RULES[f.name](wrong), f"{f.name} takes {wrong!r}"


def test_typed_vllm_settings_read_once(settings):
    vllm = VllmSettings.of(settings)
    assert vllm.vllm_port == 8000 and vllm.get("vllm_port") == 8000
    assert VllmSettings.of(vllm) is vllm
    with pytest.raises(dataclasses.FrozenInstanceError):
        vllm.vllm_port = 9000
    with pytest.raises(AttributeError):
        vllm.vllm_prot  # noqa: B018 - a misspelled read fails instead of reading None
