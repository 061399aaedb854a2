"""Facts of the model role. Each ``process()`` is pure and tested on captured output."""

from __future__ import annotations

import shlex

from pyinfra.api import FactBase


class ModelCandidates(FactBase):
    """Local copies of a model under the roots of ``model_local_dirs``, in the order the local
    source tries them (files/model/model_fetch.py ``local_candidates``):
    ``[(path, layout), ...]`` with layout ``"store"`` (``<root>/<name>/<revision>``, a rigup
    store or backup), ``"mirror"`` (``<root>/<name>`` or ``<root>/<repo basename>`` holding the
    files) or ``"hf-cache"`` (``<root>/models--<org>--<repo>``, a Hugging Face cache whose
    snapshot huggingface_hub resolves on the host). ``[]`` when there is none.
    """

    def command(
        self, model: str, revision: str, basename: str, hf_cache: str, roots: list[str]
    ) -> str:
        parts = []
        for root in roots:
            r = root.rstrip("/")
            store = shlex.quote(f"{r}/{model}/{revision}")
            parts.append(f"if test -d {store}; then echo store {store}; fi")
            for mirror in dict.fromkeys((f"{r}/{model}", f"{r}/{basename}")):
                m = shlex.quote(mirror)
                parts.append(
                    f"if test -d {m} && ! ls {m}/*/.rigup-manifest.json >/dev/null 2>&1; "
                    f"then echo mirror {m}; fi"
                )
            cache = shlex.quote(f"{r}/{hf_cache}")
            parts.append(f"if test -d {cache}; then echo hf-cache {shlex.quote(r)}; fi")
        return "; ".join(parts) + "; true" if parts else "true"

    def process(self, output: list[str]) -> list[tuple[str, str]]:
        out = []
        for line in output:
            layout, _, path = line.strip().partition(" ")
            if layout in ("store", "mirror", "hf-cache") and path:
                out.append((path, layout))
        return out
