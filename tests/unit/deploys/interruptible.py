"""A deploy for tests/unit/test_converge.py: one operation that runs long enough to be
interrupted (on @local; it changes nothing)."""

from pyinfra.operations import server

server.shell(name="Wait to be interrupted", commands=["sleep 20"])
