"""The lab pair's LLM (tests/lab/test_many_rigs.py): the checkpoint placed once, vLLM serving
it and rigup-doctor for it, in one deploy. deploys/vllm.py and deploys/doctor.py side by side
would each place the checkpoint's manifest as it was when the run began: the second put the
unlocked manifest back over the one the first placement locked, and the next run planned it
again (deploys/full.py places it once, as this does)."""

from roles.doctor import doctor
from roles.model import model, model_store
from roles.settings import host_settings
from roles.vllm import vllm

settings = host_settings()
llm = model(settings, model_store(settings))
vllm(settings, llm)
doctor(settings, llm)  # rigup-doctor's cluster section names the peer a rig lost
