"""A component deploy as ComfyUI uses the model machinery: place a manifest, link its files
into the component's model folders (plan tests only)."""

from pathlib import Path

from pyinfra.api import deploy

from roles.model import ModelStore, link_model_files, model_store
from roles.settings import host_settings

MANIFEST = Path(__file__).resolve().with_name("tiny-comfy.toml")


@deploy("Component with models")
def component(store: ModelStore) -> None:
    link_model_files(store.place(str(MANIFEST)), into="/opt/comfy/models")


settings = host_settings()
component(model_store(settings))
