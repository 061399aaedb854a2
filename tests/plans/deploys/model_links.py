"""A component deploy as ComfyUI (issue 4) uses the model machinery: place a manifest, link its
files into the component's model folders (plan tests only)."""

from pathlib import Path

from pyinfra.api import deploy

from roles.model import link_model_files, place_model

MANIFEST = Path(__file__).resolve().with_name("tiny-comfy.toml")


@deploy("Component with models")
def component() -> None:
    placed = place_model(str(MANIFEST))
    link_model_files(placed, into="/opt/comfy/models")


component()
