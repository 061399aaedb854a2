"""The model lock file: the exact files (path, size, sha256) of a hub repository at one commit,
written on the controller next to the manifest (``<name>.lock``, TOML) by the first placement of
an unpinned manifest from Hugging Face, or by files/model/model_lock.py. Pure."""

from __future__ import annotations

FORMAT = 1


def toml_value(value) -> str:
    """TOML for the value types a manifest or lock uses (str, bool, int, list of str)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    escaped = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


def lock_text(
    *,
    name: str,
    repo_id: str,
    ref: str,
    commit: str,
    files: list[dict],
    patterns: tuple[list[str], list[str]] | None = None,
    origin: str = "",
) -> str:
    """The lock of ``name``: ``repo_id`` at ``commit`` (``ref`` resolved to it), its ``files``
    (dicts with path, size, sha256 and, when it differs from path, dest). ``patterns``: the
    manifest's (include, exclude) when the files were selected by them. ``origin``: a line
    saying where and when it was locked."""
    lines = [
        f"# rigup model lock (format {FORMAT}) of {name}.toml: the exact files of {repo_id}",
        f'# at commit {commit} (ref "{ref}" when it was locked).',
        "# Every rig placing this model gets exactly these bytes: each file is checked against its",
        "# sha256. Commit this file with the manifest; delete it to lock the ref again.",
    ]
    if origin:
        lines.append(f"# {origin}")
    lines += [
        f"format = {FORMAT}",
        f"name = {toml_value(name)}",
        f"repo_id = {toml_value(repo_id)}",
        f"ref = {toml_value(ref)}",
        f"commit = {toml_value(commit)}",
    ]
    if patterns is not None:
        lines += [f"include = {toml_value(patterns[0])}", f"exclude = {toml_value(patterns[1])}"]
    for f in sorted(files, key=lambda f: f["path"]):
        lines += ["", "[[files]]", f"path = {toml_value(f['path'])}"]
        if f.get("dest") and f["dest"] != f["path"]:
            lines.append(f"dest = {toml_value(f['dest'])}")
        lines += [f"size = {f['size']}", f"sha256 = {toml_value(f['sha256'])}"]
    return "\n".join(lines) + "\n"
