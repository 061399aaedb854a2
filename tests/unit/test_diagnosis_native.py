"""rigup/diagnosis: GPUs that need a reset (GSP firmware, Xid 154 and the reset Xids),
named by index and name from nvidia-smi's rows (tests/fixtures/field/klog-gsp-reset.txt: the
lines of NVIDIA/open-gpu-kernel-modules#1134, #446, #1125)."""

from __future__ import annotations

import pytest

from rigup import diagnosis
from rigup.nvidia import read_gpu_query
from tests.captures import block

#: nvidia-smi's rows of two 3090s, the second at the bus of the reports (0b:00)
ROWS = [
    {"index": 0, "pci_bus_id": "00000000:0A:00.0", "name": "NVIDIA GeForce RTX 3090"},
    {"index": 1, "pci_bus_id": "00000000:0B:00.0", "name": "NVIDIA GeForce RTX 3090"},
]


def test_gsp_timeout_and_xid_154_name_the_gpu_and_the_reset():
    text = block("field/klog-gsp-reset.txt").output
    found = {v.id: v for v in diagnosis.classify_kernel_log(text, diagnosis.gpu_labels(ROWS))}
    gsp = found["gpu-reset/gsp-timeout"]
    assert gsp.severity == diagnosis.FAIL
    assert "GSP" in gsp.what and "GPU 1 (NVIDIA GeForce RTX 3090) at 0000:0b:00" in gsp.what
    assert "reboot" in gsp.fix and "cold power cycle" in gsp.fix
    reset = found["gpu-reset/required"]
    assert reset.severity == diagnosis.FAIL and "needs a GPU reset" in reset.what
    assert "GPU 1 (NVIDIA GeForce RTX 3090)" in reset.what and "0x1" in reset.what
    assert "GPU 1" in found["xid-119-120"].what and "cold power cycle" in found["xid-119-120"].fix
    assert diagnosis.worst(found.values()) == diagnosis.FAIL


def test_without_nvidia_smi_the_gpu_is_named_by_its_slot():
    (v,) = diagnosis.classify_kernel_log(
        "Xid (PCI:0000:0B:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 (GPU "
        "Reset Required)"
    )
    assert v.what.startswith("the GPU at 0000:0b:00 needs a GPU reset")


@pytest.mark.parametrize(
    ("to", "sig_id", "severity", "words"),
    [
        ("0x1 (GPU Reset Required)", "gpu-reset/required", diagnosis.FAIL, "a GPU reset"),
        ("0x2 (Node Reboot Required)", "gpu-reset/required", diagnosis.FAIL, "a reboot"),
        ("0x3 (Drain P2P)", "gpu-reset/drain-p2p", diagnosis.FAIL, "draining peer-to-peer"),
        ("0x4 (Drain and Reset)", "gpu-reset/required", diagnosis.FAIL, "then a GPU reset"),
        ("0x0 (None)", "gpu-reset/cleared", diagnosis.OK, "cleared"),
    ],
)
def test_every_recovery_action_of_xid_154(to, sig_id, severity, words):
    line = (
        "[ 77.1] NVRM: Xid (PCI:0000:0a:00): 154, pid='<unknown>', name=<unknown>, GPU recovery "
        f"action changed from 0x1 (GPU Reset Required) to {to}"
    )
    (v,) = diagnosis.classify_kernel_log(line, diagnosis.gpu_labels(ROWS))
    assert (v.id, v.severity) == (sig_id, severity)
    assert words in v.what and "GPU 0 (NVIDIA GeForce RTX 3090)" in v.what


@pytest.mark.parametrize("xid", [62, 95, 140, 143])
def test_the_xids_that_need_a_reset_say_so(xid):
    (v,) = diagnosis.classify_kernel_log(
        f"NVRM: Xid (PCI:0000:0b:00): {xid}, pid=1, name=python3, detail"
    )
    assert v.id == "gpu-reset/xid" and v.severity == diagnosis.FAIL
    assert f"Xid {xid}" in v.what and "needs a reset" in v.what and "reboot" in v.fix


def test_an_xid_without_a_reset_meaning_stays_a_warning():
    (v,) = diagnosis.classify_kernel_log("NVRM: Xid (PCI:0000:0b:00): 43, pid=1, name=x, Ch 1")
    assert v.id == "xid-other" and v.severity == diagnosis.WARN


def test_bus_ids_of_every_tool_are_one_slot():
    assert diagnosis.pci_slot("00000000:0B:00.0") == "0000:0b:00"
    assert diagnosis.pci_slot("0000:0b:00") == "0000:0b:00"
    assert diagnosis.pci_slot("0b:00.0") == "0000:0b:00"


def test_gpu_labels_read_rigups_own_query():
    query = read_gpu_query(block("field/smi-3090-healthy.txt").output, 0)
    labels = diagnosis.gpu_labels(query.gpus)
    assert labels == {
        "0000:01:00": "GPU 0 (NVIDIA GeForce RTX 3090)",
        "0000:02:00": "GPU 1 (NVIDIA GeForce RTX 3090)",
    }
