"""The lab's choice of checkpoint by the controller's CPU (lab/serving.py)."""

from __future__ import annotations

import pytest

from lab.serving import cpu_flags, lab_checkpoint_variant

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
flags\t\t: fpu vme de pse sse sse2 avx avx2 fma bmi2
bugs\t\t: sysret_ss_attrs
"""


def test_cpu_flags_of_proc_cpuinfo():
    assert {"avx2", "fma"} <= cpu_flags(CPUINFO) and "avx512f" not in cpu_flags(CPUINFO)
    assert cpu_flags("") == set()


def test_int4_only_where_the_cpu_build_has_its_4_bit_kernel():
    assert lab_checkpoint_variant(cpu_flags(CPUINFO), {}) == "hybrid"
    assert lab_checkpoint_variant({"avx2", "avx512f", "avx512bw"}, {}) == "hybrid-int4"


def test_chosen_by_hand_or_refused():
    assert lab_checkpoint_variant({"avx2"}, {"RIGUP_LAB_CHECKPOINT": "hybrid-int4"}) == (
        "hybrid-int4"
    )
    with pytest.raises(ValueError, match="RIGUP_LAB_CHECKPOINT"):
        lab_checkpoint_variant(set(), {"RIGUP_LAB_CHECKPOINT": "int8"})
