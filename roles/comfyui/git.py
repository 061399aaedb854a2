"""A git checkout held at a pinned commit: its state as a fact, and the operation that holds it."""

from __future__ import annotations

import shlex

from pyinfra import host
from pyinfra.api import FactBase, operation
from pyinfra.api.exceptions import OperationError


class GitCheckout(FactBase):
    """State of a git work tree: ``{"head": "<40 hex>", "origin": "<url>", "dirty": [...]}``.

    ``dirty`` lists ``git status --porcelain`` lines (changed or untracked files, ignored ones
    excluded). None when ``path`` has no ``.git``.
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"if test -d {q}/.git; then "
            f'echo "@head $(git -C {q} rev-parse -q --verify HEAD 2>/dev/null)"; '
            f'echo "@origin $(git -C {q} remote get-url origin 2>/dev/null)"; '
            f"git -C {q} status --porcelain 2>&1 | sed 's/^/@dirty /'; "
            "else echo '@absent'; fi"
        )

    def process(self, output: list[str]) -> dict | None:
        if not output or output[0] == "@absent":
            return None
        state: dict = {"head": "", "origin": "", "dirty": []}
        for line in output:
            tag, _, rest = line.partition(" ")
            if tag == "@head":
                state["head"] = rest.strip()
            elif tag == "@origin":
                state["origin"] = rest.strip()
            elif tag == "@dirty":
                state["dirty"].append(rest)
        return state


@operation()
def git_checkout_pinned(
    path: str,
    url: str,
    commit: str,
    version_check: str | None = None,
    tree: str | None = None,
):
    """Hold a git checkout of ``url`` at ``path`` on ``commit`` (detached HEAD).

    + path: work tree on the host (cloned when absent)
    + url: git URL or local mirror path; becomes/updates the ``origin`` remote
    + commit: full 40-hex commit id; fetched from origin when the clone lacks it
    + version_check: shell command run after a checkout that must pass (e.g. a version grep)
    + tree: full 40-hex git tree id ``commit`` must have (``git rev-parse <commit>^{tree}``),
      checked before the checkout; None checks nothing

    A no-op when HEAD is ``commit``, origin is ``url`` and the tree is clean. Raises
    ``OperationError`` when the work tree has local changes (they are kept, never reset); the
    commands fail when the commit is not in the repository at ``url``, or when its tree is not
    ``tree`` (naming both ids; the work tree and HEAD are left as they were, and a clone this
    run made is removed).
    """
    state = host.get_fact(GitCheckout, path=path)
    if state and state["dirty"]:
        changes = "; ".join(state["dirty"][:10])
        raise OperationError(
            f"{path} has local changes ({changes}); rigup does not reset them. Move them out "
            f"(custom nodes belong in the base directory's custom_nodes/), then re-run."
        )
    if state and state["head"] == commit and state["origin"] == url:
        host.noop(f"{path} is at {commit[:12]}")
        return
    q, c = shlex.quote(path), shlex.quote(commit)
    if state is None:
        yield f"git clone --quiet --no-checkout {shlex.quote(url)} {q}"
    elif state["origin"] != url:
        yield f"git -C {q} remote set-url origin {shlex.quote(url)}"
    yield (
        f"git -C {q} cat-file -e {c}^{{commit}} 2>/dev/null || git -C {q} fetch --quiet origin {c}"
        f" || {{ echo 'commit {commit} is not in {url}' >&2; exit 1; }}"
    )
    if tree:
        cleanup = f"rm -rf {q}; " if state is None else ""
        yield (
            f"t=$(git -C {q} rev-parse --verify --quiet {shlex.quote(commit + '^{tree}')}); "
            f'test "$t" = {shlex.quote(tree)} || {{ echo "commit {commit} has tree $t, the '
            f'release lock pins tree {tree}: refused, nothing checked out" >&2; {cleanup}exit 1; }}'
        )
    yield f"git -C {q} -c advice.detachedHead=false checkout --quiet --detach {c}"
    if version_check:
        yield version_check


@operation()
def git_checkout_tag(path: str, url: str, tag: str):
    """Check out at ``path`` the commit ``tag`` names in the repository at ``url``, resolved on the
    host when the operation runs (a release's first run, before its lock exists; later runs use
    :func:`git_checkout_pinned` with the locked commit).

    Raises ``OperationError`` when the work tree has local changes (kept, never reset); the
    commands fail when ``url`` has no such tag.
    """
    state = host.get_fact(GitCheckout, path=path)
    if state and state["dirty"]:
        changes = "; ".join(state["dirty"][:10])
        raise OperationError(
            f"{path} has local changes ({changes}); rigup does not reset them. Move them out, "
            "then re-run."
        )
    q, ref = shlex.quote(path), f"refs/tags/{tag}"
    if state is None:
        yield f"git clone --quiet --no-checkout {shlex.quote(url)} {q}"
    elif state["origin"] != url:
        yield f"git -C {q} remote set-url origin {shlex.quote(url)}"
    yield (
        f"git -C {q} fetch --quiet --force origin {shlex.quote(f'{ref}:{ref}')} || "
        f"{{ echo 'release {tag} is not a tag of {url}' >&2; exit 1; }}"
    )
    yield f"git -C {q} -c advice.detachedHead=false checkout --quiet --detach {shlex.quote(ref + '^{commit}')}"
