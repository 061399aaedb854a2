"""rigup's model tool: places models described by manifests, verified and atomically; verifies
and backs up placed models; resolves a hub reference to a lock.

Installed on each host next to its entry point (``<rigup_prefix>/model/bin/model_fetch.py`` with
this package beside it) and run by the model tool venv's python (huggingface_hub, hf_xet and
modelscope from files/model/requirements.lock). The controller imports its pure parts
(:mod:`modeltool.layout`, :mod:`modeltool.snapshot`, :mod:`modeltool.lockfile`), and
files/model/model_lock.py its hub calls. Standard library only, but for the hub libraries, which
:mod:`modeltool.hub` imports when a hub is used.

Modules, one concern each:

- :mod:`~modeltool.layout`: file and directory names in the store, exit codes, errors
- :mod:`~modeltool.progress`: progress lines, and interruption (signals, a closed connection)
- :mod:`~modeltool.hashing`: sha256 / git blob ids, a copy that resumes after comparing
- :mod:`~modeltool.snapshot`: what a model directory holds (wanted files, sizes, shards, strays)
- :mod:`~modeltool.local`: the local source (mirrors, backups, Hugging Face caches)
- :mod:`~modeltool.hub`: Hugging Face and ModelScope (resolve, list, download)
- :mod:`~modeltool.place`: ``place``: one transfer at a time, verified, published atomically
- :mod:`~modeltool.verify`: ``verify``: size, sha256, shards and stray files of a placed model
- :mod:`~modeltool.backup`: ``backup``: the store (and what the venvs need) to a backup disk
- :mod:`~modeltool.lockfile`: the model lock file (TOML) rigup writes on the controller
- :mod:`~modeltool.cli`: the command line of model_fetch.py
"""
