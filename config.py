# pyinfra reads this file from the directory it is run in (the repository root).
# rigup is written and tested against pyinfra 3.10; refuse any other release.
REQUIRE_PYINFRA_VERSION = "==3.10.*"
