"""rigup/diagnosis: the one table of signatures and its classifiers, on captured output
(tests/fixtures/h200x2, CAPTURES.md) and real-shaped output of the faults no machine here shows
(tests/fixtures/field, README.md)."""

from __future__ import annotations

import random
import re

import pytest

from rigup import diagnosis
from rigup.nvidia import (
    diagnose_driver,
    parse_driver_state,
    parse_secure_boot,
    read_gpu_query,
)
from tests.captures import FIXTURES, block, blocks

# --- the table ------------------------------------------------------------------------------------


def test_signatures_are_well_formed_data():
    seen = set()
    for sig in diagnosis.SIGNATURES:
        assert (sig.source, sig.id) not in seen, sig.id
        seen.add((sig.source, sig.id))
        assert sig.source in diagnosis.SOURCES and sig.severity in diagnosis.SEVERITIES
        assert sig.what and sig.why and sig.fix, sig.id
        assert sig.pattern or sig.exit_codes or sig.matcher, f"{sig.id} recognises nothing"
        if sig.pattern:
            re.compile(sig.pattern)
        for pattern in sig.context.values():
            assert re.compile(pattern).groups == 1


def test_verdict_reads_as_one_sentence():
    v = diagnosis.classify_kernel_log(block("field/klog-xid79.txt").output)[0]
    assert str(v) == f"{v.what}: {v.why}. Fix: {v.fix}"
    assert v.as_dict()["id"] == "xid-79" and v.kind == "xid-79" and v.cause == ""


def test_exit_status_and_refine():
    ok = diagnosis.Verdict("a", diagnosis.OK, "w", "y", "f")
    warn = diagnosis.Verdict("b", diagnosis.WARN, "w", "y", "f")
    fail = diagnosis.Verdict("driver-not-loaded", diagnosis.FAIL, "w", "y", "f")
    assert [diagnosis.exit_status(v) for v in ([], [ok], [ok, warn], [warn, fail])] == [0, 0, 1, 2]
    better = diagnosis.Verdict("driver-not-loaded/secure-boot", diagnosis.FAIL, "w", "y2", "f")
    assert diagnosis.refine([warn, fail], [better]) == [warn, better]
    assert diagnosis.refine([warn], [better]) == [warn]


# --- nvidia-smi: any rows, any error lines, any exit status ---------------------------------------


def test_gpu_fell_off_the_bus_next_to_a_healthy_row():
    """Field report: exit 15, GPU 0's row, then the lost GPU 1's line."""
    capture = block("field/smi-gpu1-unreachable.txt")
    query = read_gpu_query(capture.output, capture.exit_code)
    assert [g.index for g in query.gpus] == [0]
    (lost,) = query.failed
    assert lost.id == "gpu-lost" and lost.what == "GPU 1 at 0000:02:00.0 unreachable"
    for advice in ("Xid 79", "fallen off the bus", "riser", "power", "reseat", "cold power cycle"):
        assert advice in str(lost), advice
    assert "reboot" not in lost.fix.replace("a warm reboot usually does not", "")
    assert lost.evidence == (
        "Unable to determine the device handle for GPU1: 0000:02:00.0: Unknown Error",
    )


def test_gpu_is_lost_without_an_index():
    capture = block("field/smi-gpu-is-lost.txt")
    query = read_gpu_query(capture.output, capture.exit_code)
    (lost,) = query.failed
    assert lost.what == "the GPU at 0000:02:00.0 unreachable" and "GPU is lost" in lost.why


def test_exit_15_alone_is_a_lost_gpu():
    (lost,) = read_gpu_query("", 15).failed
    assert lost.id == "gpu-lost" and lost.what == "a GPU unreachable"


@pytest.mark.parametrize(
    "fixture,sig_id,what",
    [
        ("field/smi-no-driver.txt", "driver-not-loaded", "the NVIDIA kernel module is not loaded"),
        ("field/smi-version-mismatch.txt", "driver-library-mismatch", "userspace libraries"),
    ],
)
def test_driver_failures(fixture, sig_id, what):
    capture = block(fixture)
    query = read_gpu_query(capture.output, capture.exit_code)
    (v,) = query.verdicts
    assert v.id == sig_id and what in v.what and query.gpus == []
    if sig_id == "driver-library-mismatch":
        assert "(580.95)" in v.why and v.reboot_fixes


@pytest.mark.parametrize(
    "index,sig_id,what",
    [
        (0, "query-field-unknown", "does not know the field 'bogus_field'"),
        (1, "no-gpus", "lists no GPU"),
        (2, "no-gpus", "lists no GPU"),
        (3, "option-unknown", "does not know the option 'nvlink'"),
    ],
)
def test_captured_nvidia_smi_errors(index, sig_id, what):
    """Captured on the 2x H200 machine, each with its real exit status."""
    capture = blocks("h200x2/query-errors.txt")[index]
    (v,) = read_gpu_query(capture.output, capture.exit_code).verdicts
    assert v.id == sig_id and what in v.what and v.severity == diagnosis.FAIL


def test_captured_healthy_query_reads_compute_capability():
    capture = block("h200x2/query-gpu-compute-cap.txt")
    query = read_gpu_query(capture.output, capture.exit_code)
    assert query.verdicts == [] and query.error is None
    assert [(g.index, g.compute_capability, g.power_limit_w) for g in query.gpus] == [
        (0, "9.0", 700.0),
        (1, "9.0", 700.0),
    ]


def test_inforom_warning_keeps_the_rows():
    capture = block("field/smi-inforom.txt")
    query = read_gpu_query(capture.output, capture.exit_code)
    assert len(query.gpus) == 2 and query.failed == []
    (v,) = query.verdicts
    assert v.id == "inforom-corrupted" and v.severity == diagnosis.WARN


ROWS = [
    block("field/smi-3090-healthy.txt").lines[0],
    block("field/smi-3090-healthy.txt").lines[1],
    "0, GPU-x, 00000000:01:00.0, GeForce, 580.1, Disabled, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]",
]
ERROR_LINES = [
    "Unable to determine the device handle for GPU1: 0000:02:00.0: Unknown Error",
    "Unable to determine the device handle for GPU0000:03:00.0: GPU is lost.  Reboot the system to recover this GPU",
    "Unable to determine the device handle for gpu 0000:04:00.0: Insufficient Permissions",
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.",
    "Failed to initialize NVML: Driver/library version mismatch",
    "Failed to initialize NVML: Unknown Error",
    "No devices were found",
    'Field "compute_cap" is not a valid field to query.',
    "WARNING: infoROM is corrupted at gpu 0000:01:00.0",
    "Segmentation fault (core dumped)",
    "0, GPU-x, 290.00",
    "x, GPU-y, 00000000:01:00.0, NVIDIA GeForce RTX 3090, 580.95.05, Enabled, a, b, c, d, e, 8.6",
    "",
    "\x1b[31m\x00\ufffd",
]
EXIT_CODES = [0, 2, 3, 4, 6, 8, 9, 10, 12, 13, 14, 15, 18, 42, 124, 127, 255]


@pytest.mark.parametrize("exit_code", EXIT_CODES)
def test_any_mix_of_rows_and_errors_never_raises(exit_code):
    """Every subset-order of rows and error lines a table can list, with every exit status:
    no traceback, every row read, every non-zero status explained by a failure."""
    for rows in ([], ROWS[:1], ROWS):
        for errors in ([], *([e] for e in ERROR_LINES), ERROR_LINES):
            for text in ("\n".join(rows + errors), "\n".join(errors + rows)):
                query = read_gpu_query(text, exit_code)
                assert len(query.gpus) == len(rows)
                if exit_code:  # explained: a failure, or exit 14's infoROM warning
                    assert query.failed or exit_code == 14, (text, exit_code)
                    assert query.verdicts
                for v in query.verdicts:
                    assert v.what and v.fix and "?" not in v.what, v


def test_random_output_never_raises():
    """A deterministic fuzz: random lines of commas, digits, words and error fragments."""
    rng = random.Random(20261201)
    pieces = [*ERROR_LINES, *ROWS, ",", "[N/A]", "GPU", "0000:02:00.0", "Unable to determine", "é"]
    for _ in range(2000):
        lines = [
            " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
            for _ in range(rng.randint(0, 6))
        ]
        code = rng.choice([None, *EXIT_CODES])
        query = read_gpu_query("\n".join(lines), code)
        if code:
            assert query.failed or code == 14
    assert read_gpu_query(None, None).verdicts == []


# --- kernel log: Xid events ------------------------------------------------------------------------


def test_xid_79_from_both_of_its_lines_is_one_verdict():
    (v,) = diagnosis.classify_kernel_log(block("field/klog-xid79.txt").output)
    assert v.id == "xid-79" and v.severity == diagnosis.FAIL and len(v.evidence) == 2
    assert "0000:02:00" in v.what and "cold power cycle" in v.fix


def test_xid_meanings():
    verdicts = diagnosis.classify_kernel_log(block("field/klog-xids.txt").output)
    by_what = {v.what: v for v in verdicts}
    ids = sorted({v.id for v in verdicts})
    assert ids == ["xid-119-120", "xid-13-31", "xid-48", "xid-63", "xid-64", "xid-74", "xid-other"]
    xid13 = by_what["a GPU program faulted on the GPU at 0000:01:00 (Xid 13)"]
    assert "vllm#50021" in xid13.why and "MTP" in xid13.why and len(xid13.evidence) == 2
    assert "vllm_speculative_config = None" in xid13.fix and xid13.severity == diagnosis.WARN
    assert "Xid 31" in " ".join(by_what)
    assert by_what["NVLink error on the GPU at 0000:01:00 (Xid 74)"].severity == diagnosis.FAIL
    assert "Xid 119" in " ".join(by_what) and "Xid 120" in " ".join(by_what)
    assert "Xid 43 on the GPU at 0000:01:00" in by_what


def test_healthy_captured_kernel_log_has_no_verdict():
    assert diagnosis.classify_kernel_log((FIXTURES / "h200x2/dmesg-nvrm.txt").read_text()) == []


def test_module_rejection_and_api_mismatch():
    (rejected,) = diagnosis.classify_kernel_log(block("field/klog-lockdown.txt").output)
    assert rejected.id == "module-rejected"
    (mismatch,) = diagnosis.classify_kernel_log(block("field/klog-api-mismatch.txt").output)
    assert mismatch.id == "driver-library-mismatch" and "580.82.07" in mismatch.why


# --- DKMS ------------------------------------------------------------------------------------------


def test_dkms_bad_return_status_names_the_log_and_the_causes():
    (v,) = diagnosis.classify_dkms(block("field/apt-dkms-bad-return.txt").output)
    assert v.id == "dkms-build-failed" and "7.0.0-44-generic" in v.what
    assert "/var/lib/dkms/nvidia/580.95.05/build/make.log" in v.why
    assert "headers" in v.why and "compiler" in v.why


def test_dkms_causes():
    (headers,) = diagnosis.classify_dkms(block("field/dkms-headers-missing.txt").output)
    assert headers.fix == "`apt install linux-headers-7.0.0-44-generic`"
    mismatch, missing = diagnosis.classify_dkms(
        block("field/make-log-compiler-mismatch.txt").output
    )
    assert "x86_64-linux-gnu-gcc-15" in mismatch.why and "gcc-14" in mismatch.why
    assert missing.fix == "`apt install gcc-15`"


def test_no_dkms_advice_points_to_the_ubuntu_prebuilt_modules():
    """On the NVIDIA-repository path the answer to a failed build is never Canonical's modules."""
    texts = [str(s.fix) + s.why for s in diagnosis.signatures("dkms")]
    state = parse_driver_state(block("field/state-dkms-failed.txt").lines)
    texts += [str(v) for v in diagnose_driver(state)]
    for text in texts:
        assert "linux-modules-nvidia" not in text and "prebuilt" not in text, text


# --- Secure Boot -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fixture,enforced,state",
    [
        ("field/sb-enabled.txt", True, "enforced"),
        ("field/sb-disabled.txt", False, "disabled"),
        ("field/sb-shim-validation-disabled.txt", False, "shim-validation-disabled"),
        ("field/sb-shim-validation-disabled-colour.txt", False, "shim-validation-disabled"),
        ("field/sb-setup-mode.txt", False, "setup-mode"),
        ("field/sb-no-efi.txt", False, "no-efi"),
        ("field/sb-unsupported.txt", False, "unsupported"),
        ("field/sb-cannot-determine.txt", None, "unknown"),
        ("h200x2/mokutil.txt", None, "unknown"),  # captured: mokutil not installed
    ],
)
def test_every_mokutil_shape(fixture, enforced, state):
    text = block(fixture).output
    sb = diagnosis.secure_boot(text)
    assert (sb.enforced, sb.state) == (enforced, state)
    assert parse_secure_boot(text) is enforced


def test_without_mokutil_the_efi_variables_decide():
    absent = block("h200x2/mokutil.txt").output
    assert diagnosis.secure_boot(absent, efi=False).state == "no-efi"  # the H200 machine
    assert diagnosis.secure_boot(absent, efi=True, sb_var=1, setup_var=0).enforced is True
    shim = diagnosis.secure_boot(absent, efi=True, sb_var=1, setup_var=0, moksbstate=True)
    assert (shim.enforced, shim.state) == (False, "shim-validation-disabled")
    assert diagnosis.secure_boot(absent, efi=True, sb_var=0, setup_var=1).state == "setup-mode"
    assert diagnosis.secure_boot(absent, efi=True).enforced is None


# --- driver not loaded: one diagnosis, its cause ----------------------------------------------------


@pytest.mark.parametrize(
    "fixture,cause,words,reboot",
    [
        ("field/state-nouveau-bound.txt", "nouveau", ["bound to the GPUs"], True),
        (
            "field/state-dkms-failed.txt",
            "dkms-failed",
            ["/var/lib/dkms/nvidia/580.95.05/build/make.log", "compiler differs", "gcc-15"],
            False,
        ),
        ("field/state-secure-boot-blocked.txt", "secure-boot", ["not signed", "mokutil"], False),
        (
            "field/state-not-installed-for-kernel.txt",
            "not-installed-for-kernel",
            ["7.0.0-45-generic", "it exists for 7.0.0-44-generic", "linux-modules-nvidia"],
            False,
        ),
        ("field/state-installed-not-loaded.txt", "installed-not-loaded", ["reboot"], True),
        ("field/state-fresh.txt", "not-installed", ["converge"], False),
    ],
)
def test_driver_not_loaded_is_one_diagnosis_with_its_cause(fixture, cause, words, reboot):
    state = parse_driver_state(block(fixture).lines)
    (v,) = diagnose_driver(state)
    assert v.kind == "driver-not-loaded" and v.cause == cause
    assert v.what == "the NVIDIA kernel module is not loaded" and v.severity == diagnosis.FAIL
    for word in words:
        assert word in str(v), word
    assert v.reboot_fixes is reboot


def test_not_installed_for_kernel_on_the_repository_path_says_dkms():
    state = parse_driver_state(block("field/state-not-installed-for-kernel.txt").lines)
    (v,) = diagnose_driver(state, install_path="nvidia-repo")
    assert "dkms autoinstall -k 7.0.0-45-generic" in v.fix and "prebuilt" not in v.fix


def test_nvidia_smi_not_loaded_is_refined_by_the_state():
    capture = block("field/smi-no-driver.txt")
    query = read_gpu_query(capture.output, capture.exit_code)
    state = parse_driver_state(block("field/state-secure-boot-blocked.txt").lines)
    from rigup.nvidia import explain

    (v,) = explain(query.verdicts, state)
    assert v.id == "driver-not-loaded/secure-boot"


@pytest.mark.parametrize("at", [0, 1])
def test_a_reset_refused_by_persistence_mode_says_what_holds_it_and_the_order(at):
    """NVIDIA/NVSentinel#1690: `nvidia-smi -r` exits 255 "In use by another client" while
    persistence mode holds the GPU; rigup keeps it on, so the fix stops it first."""
    b = blocks("field/smi-reset-in-use.txt")[at]
    verdicts, _ = diagnosis.classify_nvidia_smi(b.output.splitlines(), b.exit_code)
    (v,) = verdicts
    assert v.id == "gpu-reset-refused/in-use" and v.severity == diagnosis.FAIL
    assert v.what.startswith("nvidia-smi refused to reset the GPU at 00000000:")
    assert "nvidia-persistenced" in v.why and "rigup keeps persistence mode on" in v.why
    order = [v.fix.index(step) for step in (
        "systemctl stop vllm.service", "systemctl stop nvidia-persistenced", "nvidia-smi -pm 0",
        "nvidia-smi -r -i", "systemctl start nvidia-persistenced", "nvidia-smi -pm 1",
        "rigup-mode", "reboot",
    )]  # fmt: skip
    assert order == sorted(order)


def test_every_reset_advice_says_that_rigup_keeps_persistence_on():
    """Each verdict whose fix is a GPU reset (Xid 154, GSP timeouts, the Xids NVIDIA resolves
    with a reset) gives the order that works with persistence mode on."""
    resets = [s for s in diagnosis.SIGNATURES if "nvidia-smi -r" in s.fix]
    assert len(resets) >= 4
    for sig in resets:
        assert "stop nvidia-persistenced" in sig.fix and "nvidia-smi -pm 1" in sig.fix, sig.id
