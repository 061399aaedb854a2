"""A deploy for tests/unit/test_converge.py: one operation on @local that is certain to be
running when the test signals the run. It creates the file named by $RIGUP_TEST_STARTED (the
test waits for it), then waits until its controller is gone: it never ends by itself, and it
ends with its output pipe (its next heartbeat fails). It changes nothing else."""

import os
import shlex

from pyinfra.operations import server

started = shlex.quote(os.environ["RIGUP_TEST_STARTED"])
server.shell(
    name="Wait to be interrupted",
    commands=[f"touch {started}; while sleep 0.2; do echo . || exit 0; done"],
)
