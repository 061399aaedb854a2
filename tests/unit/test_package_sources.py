"""Where Python packages come from (roles/common/uv.py): the settings, uv's environment and the
options of the pip that installs uv, all from one place."""

from __future__ import annotations

import pytest

from roles.common.uv import PackageSources
from roles.settings import validate

TUNA = "https://pypi.tuna.tsinghua.edu.cn/simple"


def test_pypi_by_default(settings):
    sources = PackageSources.from_data(settings)
    assert sources.uv_env() == "" and sources.pip_args() == []
    assert sources.indexes() == ["https://pypi.org/simple"]


def test_a_mirror_extra_indexes_and_a_wheel_directory(settings):
    settings.update(
        uv_index_url=TUNA,
        uv_extra_index_urls=["https://download.pytorch.org/whl/cu130"],
        uv_find_links=["/mnt/nas/wheels", "file:///srv/wheels"],
    )
    assert validate(settings) == []
    sources = PackageSources.from_data(settings)
    assert sources.uv_env() == (
        f"UV_DEFAULT_INDEX={TUNA} UV_INDEX=https://download.pytorch.org/whl/cu130 "
        "UV_FIND_LINKS=/mnt/nas/wheels,file:///srv/wheels"
    )
    assert sources.pip_args() == [
        "--index-url", TUNA,
        "--extra-index-url", "https://download.pytorch.org/whl/cu130",
        "--find-links", "/mnt/nas/wheels", "--find-links", "file:///srv/wheels",
    ]  # fmt: skip
    assert sources.indexes() == ["https://download.pytorch.org/whl/cu130", TUNA]
    settings["uv_extra_index_urls"] = ["https://a/simple", "https://b/simple"]
    assert (
        "'UV_INDEX=https://a/simple https://b/simple'"
        in PackageSources.from_data(settings).uv_env()
    )


def test_offline_uses_only_the_wheel_directories_and_the_cache(settings):
    settings.update(uv_find_links=["/mnt/backup/rigup/wheels"], uv_offline=True)
    sources = PackageSources.from_data(settings)
    assert sources.uv_env() == "UV_FIND_LINKS=/mnt/backup/rigup/wheels UV_OFFLINE=1"
    assert sources.pip_args() == ["--no-index", "--find-links", "/mnt/backup/rigup/wheels"]
    assert sources.indexes() == []


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("uv_index_url", "pypi.tuna.tsinghua.edu.cn", "must be empty or an http(s) URL"),
        ("uv_extra_index_urls", "https://x/simple", "must be a list of strings"),
        ("uv_extra_index_urls", ["ftp://x"], "must be http(s) URLs"),
        ("uv_find_links", ["wheels"], "must be absolute paths or URLs"),
        ("uv_find_links", ["/a,/b"], "no spaces or commas"),
        ("uv_offline", "yes", "must be True or False"),
        ("uv_version", "0.13.8", "pins uv==0.13.9"),
    ],
)
def test_bad_package_sources_are_named(settings, key, value, fragment):
    settings[key] = value
    (problem,) = validate(settings)
    assert problem.startswith(f"{key}: ") and fragment in problem
