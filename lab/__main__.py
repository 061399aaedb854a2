"""Command line of the lab machine: ``python -m lab {up,stop,destroy,status,ssh,push,converge}``,
and of the lab pair (lab/pair.py): ``python -m lab {pair-up,pair-destroy}``.

Settings come from ``RIGUP_LAB_*`` environment variables (see :class:`lab.config.LabConfig`).
Errors the user can act on print one paragraph and exit 2, without a traceback.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from lab import comfyui_lab, hub_lab, uvshare, voxcpm_lab
from lab.config import LabConfig, LabError
from lab.machine import LabMachine
from lab.render import ssh_argv
from lab.step import StepResult


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m lab``."""
    parser = argparse.ArgumentParser(
        prog="python -m lab",
        description="The rigup lab machine: a booted Debian or Ubuntu systemd-nspawn container "
        "(RIGUP_LAB_SUITE) reached over SSH on 127.0.0.1:$RIGUP_LAB_SSH_PORT (default 2222). Needs root.",
        epilog="Settings: RIGUP_LAB_NAME, RIGUP_LAB_SSH_PORT, RIGUP_LAB_STATE_DIR, "
        "RIGUP_LAB_CACHE_DIR, RIGUP_LAB_SUITE (resolute, the default; trixie, forky), RIGUP_LAB_MIRROR, "
        "RIGUP_LAB_UV_CACHE (0 to disable).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("up", help="create (if needed) and boot the machine; wait until SSH answers")
    sub.add_parser("stop", help="shut the machine down (its rootfs is kept)")
    sub.add_parser("destroy", help="stop and delete the machine (the template cache is kept)")
    sub.add_parser("status", help="print name, state, port, rootfs and key path")
    p_ssh = sub.add_parser(
        "ssh",
        help="run a command in the machine (a shell if none): ssh -- CMD... "
        "(like ssh, the words are joined into one shell command line)",
    )
    p_ssh.add_argument("cmd", nargs=argparse.REMAINDER, help="command and arguments")
    p_push = sub.add_parser("push", help="copy a host file or directory into the machine")
    p_push.add_argument("src", type=Path, help="host file or directory")
    p_push.add_argument("dest", help="absolute path in the machine")
    sub.add_parser(
        "layers",
        help="up, seed the model mirror, converge the base, model and vLLM layers "
        "(deploys/base.py, deploys/vllm.py, deploys/modes.py), re-run them --dry --json (0 "
        "changes), run their testinfra modules, then serve (the CPU build) or, with "
        "RIGUP_LAB_VLLM_DEVICE=cuda, run tests/vllm on the rig's build; print a summary "
        "(RIGUP_LAB_SUITE=resolute: on Ubuntu 26.04's python3 3.14, as on the rig)",
    )
    sub.add_parser(
        "converge",
        help="up, seed the models into the lab's Hugging Face-compatible server, run "
        "deploys/full.py, re-run it --dry --json (must plan 0 changes), run testinfra "
        "(tests/infra), switch to the LLM mode (vLLM serves) and verify it, print a summary; "
        "the machine keeps running",
    )
    sub.add_parser(
        "suite-workers",
        help="print how many pytest-xdist workers the test suite's lab machines have disk for "
        "(2 or 1; lab/diskplan.py); exit 2 naming the need when not even one fits",
    )
    sub.add_parser(
        "pair-up",
        help="the lab pair (lab/pair.py): its namespaces, bridge and relay, and both machines "
        "SSH-ready (RIGUP_LAB_PAIR, default rigs; RIGUP_LAB_SSH_PORT: rig a's port, default 2301; "
        "converge it with inventory/lab_rigs.py)",
    )
    sub.add_parser(
        "pair-destroy",
        help="stop and delete the lab pair's machines, relay and namespaces, also what an "
        "interrupted run left",
    )
    return parser


def converge(machine: LabMachine) -> int:
    """The main job on the lab (README's first command): the scenario without destroy. Returns 0 when all passed."""
    from lab import scenario, serving  # here, not above: they need numpy, tokenizers, openai

    started = time.monotonic()
    machine.up()
    up = StepResult("create/up", 0, time.monotonic() - started)
    steps = [up, scenario.seed_mirror(machine), comfyui_lab.seed(machine), voxcpm_lab.seed(machine)]
    steps.append(hub_lab.seed(machine))  # the seeded models become the lab hub's repositories
    steps.append(scenario.converge())
    later = ("idempotence", "verify", "serve", "verify llm")
    if steps[-1].ok:
        steps.append(scenario.idempotence())
        # the media mode's services are verified in the media mode (the lab's boot mode; a
        # previous run may have left the lab in the LLM mode), then vLLM in the LLM mode
        machine.ssh("rigup-mode media >/dev/null", check=False)
        steps.append(scenario.verify())
        steps.append(serving.serve(machine))
        if steps[-1].ok:  # the same checks a user runs, in the mode bin/rigup-lab leaves
            steps.append(scenario.verify(name="verify llm"))
        for step in steps:
            if not step.ok and not step.skipped:
                print(step.detail.get("output") or step.detail.get("stderr", ""), file=sys.stderr)
    else:
        skipped = "not run: the converge failed (its error is above)"
        steps += [StepResult(n, -1, 0.0, {"skipped": skipped}) for n in later]
    uvshare.harvest_machine(machine.cfg, machine.log)  # the machine keeps running; its uv is idle
    print(scenario.format_summary(steps, machine))
    return 0 if all(s.ok for s in steps) else 1


def layers(machine: LabMachine) -> int:
    """The base, model and vLLM layers with their checks, on the machine's own python3 (forky:
    3.14, as on Ubuntu 26.04). With RIGUP_LAB_VLLM_DEVICE=cuda the rig's CUDA build is installed
    and checked by vLLM's own code (tests/vllm runs on it); otherwise the CPU build serves
    (`rigup-mode llm`). Returns 0 when all passed; the machine keeps running."""
    from lab import scenario, serving  # here, not above: they need numpy, tokenizers, openai

    started = time.monotonic()
    machine.up()
    python = machine.ssh("python3 --version", check=False).stdout.strip()
    device = os.environ.get("RIGUP_LAB_VLLM_DEVICE", "cpu")
    steps = [StepResult("create/up", 0, time.monotonic() - started), scenario.seed_mirror(machine)]
    steps.append(scenario.converge("inventory/lab.py", *scenario.LAYER_DEPLOYS))
    if steps[-1].ok:
        steps.append(scenario.idempotence("inventory/lab.py", *scenario.LAYER_DEPLOYS))
        steps.append(scenario.verify(extra=list(scenario.LAYER_TESTS)))
        if device == "cuda":
            steps.append(scenario.vllm_checks())
        else:
            steps.append(serving.serve(machine))
            if steps[-1].ok:
                steps.append(scenario.verify(extra=list(scenario.LAYER_TESTS), name="verify llm"))
        for step in steps:
            if not step.ok and not step.skipped:
                print(step.detail.get("output") or step.detail.get("stderr", ""), file=sys.stderr)
    uvshare.harvest_machine(machine.cfg, machine.log)
    print(scenario.format_summary(steps, machine, full=False))
    print(
        f"lab machine {machine.cfg.name}: {machine.cfg.suite_info.release}, {python}, vLLM {device}"
    )
    print(f"layers total: {time.monotonic() - started:.0f} s")
    return 0 if all(s.ok for s in steps) else 1


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (2 for a :class:`LabError`)."""
    args = build_parser().parse_args(argv)
    started = time.monotonic()
    try:
        if args.command in ("pair-up", "pair-destroy"):
            from lab.pair import LabPair

            pair = LabPair()
            if args.command == "pair-up":
                pair.up()
                for m in pair.machines:
                    print(
                        f"{m.cfg.name}: {m.cfg.address} on {pair.net.subnet}, ssh -i "
                        f"{m.cfg.ssh_key} -p {m.cfg.ssh_port} root@127.0.0.1"
                    )
            else:
                pair.destroy()
            return 0
        if args.command == "suite-workers":
            from lab.diskplan import suite_plan

            disk = suite_plan()
            print(f"lab: {disk.why}", file=sys.stderr)
            print(disk.workers)
            return 0
        cfg = LabConfig.from_env()
        machine = LabMachine(cfg)
        if args.command == "up":
            machine.up()
        elif args.command == "stop":
            machine.stop()
            print(f"lab: stop took {time.monotonic() - started:.1f} s", file=sys.stderr)
        elif args.command == "destroy":
            machine.destroy()
        elif args.command == "status":
            st = machine.status()
            print(f"name:        {st['name']}")
            print(f"suite:       {cfg.suite} ({cfg.suite_info.release}, from {cfg.mirror})")
            pid = f" (nspawn pid {st['pid']})" if st["pid"] else ""
            print(f"state:       {st['state']}{pid}")
            print(f"ssh port:    127.0.0.1:{st['ssh_port']}")
            print(f"rootfs:      {st['rootfs']}")
            print(f"ssh key:     {st['ssh_key']}")
            print(f"known_hosts: {st['known_hosts']}")
            built = "" if st["template_cached"] else " (not built yet)"
            print(f"template:    {st['template']}{built}")
            print(f"uv cache:    {st['uv_cache'] or 'off'}")
        elif args.command == "ssh":
            cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
            if machine.state() != "running":
                raise LabError(f"{cfg.name} is not running: start it with `python -m lab up`")
            interactive = not cmd
            argv_ = ssh_argv(
                cfg, " ".join(cmd) if cmd else None, tty=interactive and sys.stdin.isatty()
            )
            return subprocess.run(argv_).returncode
        elif args.command == "push":
            machine.push(args.src, args.dest)
        elif args.command == "converge":
            return converge(machine)
        elif args.command == "layers":
            return layers(machine)
    except LabError as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
