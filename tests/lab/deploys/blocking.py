"""A deploy for tests/lab/test_scenario_truth.py: an operation certain to be running when the
test interrupts or kills the converge. It takes the converge lock as every rigup deploy does,
then its one operation writes its shell's pid on the host (tests/lab/blocking.py names where)
and waits until its controller is gone: it never ends by itself, and it ends with the connection
(its next heartbeat to the closed channel fails), leaving nothing running."""

from pyinfra.operations import server

from roles.settings import host_settings
from tests.lab.blocking import OPERATION, STARTED

host_settings()
server.shell(
    name=OPERATION,
    commands=[f"echo $$ > {STARTED}; while sleep 1; do echo . || exit 0; done"],
)
