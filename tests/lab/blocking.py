"""The names tests/lab/deploys/blocking.py and the tests that signal it share."""

#: the deploy: an operation certain to be running when a test signals or kills the converge
DEPLOY = "tests/lab/deploys/blocking.py"
#: where the blocking operation records that it runs (its shell's pid) on the lab
STARTED = "/run/rigup-test-blocking.pid"
#: the operation's name, as an interrupted converge names it
OPERATION = "Block until the controller is gone"
