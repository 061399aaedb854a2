"""The cluster's firewall and supervisor on each rig (roles/cluster):
`pyinfra inventory/rigs.py deploys/cluster.py`."""

from roles.cluster import cluster
from roles.settings import host_settings

cluster(host_settings())
