"""Where uv (and the pip that installs uv) get Python packages: PyPI, a mirror of it, extra
indexes, wheel directories, or nothing but those directories and the cache (``uv_offline``).
Settings ``uv_index_url``, ``uv_extra_index_urls``, ``uv_find_links``, ``uv_offline``; the same
for every venv rigup builds (roles/common/venv.py ``locked_venv``). The locks' hashes are
enforced whatever the source: a mirror serves the same files or fails the install."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

#: what pip and uv use when uv_index_url is empty
PYPI = "https://pypi.org/simple"


@dataclass(frozen=True)
class PackageSources:
    """Package sources of one host (build with :meth:`from_data`)."""

    index_url: str = ""
    extra_index_urls: tuple[str, ...] = ()
    find_links: tuple[str, ...] = ()
    offline: bool = False

    @classmethod
    def from_data(cls, data: Any) -> PackageSources:
        return cls(
            index_url=str(data.get("uv_index_url") or ""),
            extra_index_urls=tuple(data.get("uv_extra_index_urls") or ()),
            find_links=tuple(data.get("uv_find_links") or ()),
            offline=bool(data.get("uv_offline")),
        )

    def uv_env(self) -> str:
        """Environment words for uv (``UV_DEFAULT_INDEX``, ``UV_INDEX``, ``UV_FIND_LINKS``,
        ``UV_OFFLINE``); "" for PyPI alone."""
        words = []
        if self.index_url:
            words.append(f"UV_DEFAULT_INDEX={self.index_url}")
        if self.extra_index_urls:
            words.append(f"UV_INDEX={' '.join(self.extra_index_urls)}")
        if self.find_links:
            words.append(f"UV_FIND_LINKS={','.join(self.find_links)}")
        if self.offline:
            words.append("UV_OFFLINE=1")
        return " ".join(shlex.quote(w) for w in words)

    def pip_args(self) -> list[str]:
        """The same sources as pip options (the pip that installs uv itself)."""
        args = []
        if self.offline:
            args.append("--no-index")
        elif self.index_url:
            args += ["--index-url", self.index_url]
        if not self.offline:
            for url in self.extra_index_urls:
                args += ["--extra-index-url", url]
        for place in self.find_links:
            args += ["--find-links", place]
        return args

    def indexes(self) -> list[str]:
        """The index URLs in the order uv asks them (the wheelhouse a backup fills uses them)."""
        if self.offline:
            return []
        return [*self.extra_index_urls, self.index_url or PYPI]
