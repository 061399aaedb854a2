"""ComfyUI releases (roles/comfyui/release.py): a tag pinned by its lock, the shipped v0.8.0
lock, locks that cannot be used, and the lock a first run writes."""

from __future__ import annotations

import pytest

from roles.comfyui.release import RELEASES, ReleaseError, load_release, lock_text, release_of

COMMIT = "fc0cb10bcbee6e73ed3caf34c27f7bde4559a07f"


def test_the_shipped_release_is_locked(settings):
    release = release_of(settings)
    assert (release.tag, release.commit, release.version) == ("v0.8.0", COMMIT, "0.8.0")
    assert release.requirements == RELEASES / "v0.8.0.requirements.lock"
    assert "--hash=sha256:" in release.requirements.read_text()
    assert release.label == "ComfyUI 0.8.0"


def test_a_mirror_of_ones_own_may_name_another_commit(settings):
    settings["comfyui_commit"] = "a" * 40
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
