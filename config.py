# pyinfra reads this file from the directory it is run in (the repository root), before it
# connects to any host. rigup is written and tested against pyinfra 3.10; refuse any other release.
REQUIRE_PYINFRA_VERSION = "==3.10.*"

# An interrupted converge (SIGINT, SIGTERM, SIGHUP) exits 128 + the signal number, naming the
# operation it interrupted on each host (pyinfra alone prints "Exiting upon user request!" and
# exits 0).
from roles.common.converge import report_interruptions  # noqa: E402

report_interruptions()
