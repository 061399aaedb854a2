"""The ComfyUI release machinery alone (checkout, requirements lock, venv, release lock), as
roles/comfyui runs it: tests/lab/test_scenario_modes.py runs it against a test repository of its
own, with tags a first run locks."""

from pyinfra.api import deploy

from roles.comfyui.release import release_source
from roles.settings import host_settings


@deploy("ComfyUI release")
def comfyui_release(settings) -> None:
    release_source(settings)


comfyui_release(host_settings())
