"""Back up the rig: `pyinfra inventory/rig.py deploys/model_backup.py --data model_backup_dir=/mnt/backup/rigup`

Copies every placed model (<model_store_dir>/<name>/<revision> with its record) to
model_backup_dir, verified against the sha256 recorded at placement (models already there are
skipped), with the wheels every venv installed and the CPython builds (rigup-backup.json names
the settings that restore from them). Restore = add that directory to model_local_dirs (README, "Rebuild after a disk failure").
"""

from roles.model import model_backup, model_store
from roles.settings import host_settings

settings = host_settings()
model_backup(settings, model_store(settings))
