"""The ``tolk`` console script: ``tolk devices [--json] [--check] [-v]``, ``tolk config``, ``tolk doctor``,
``tolk new-plugin NAME [--graph]``."""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import traceback
from typing import Any

from tolk_core import config
from tolk_core.errors import TolkError
from tolk_core.plugins import Device, PluginWarning, Registry, Resolution, get_registry
from tolk_core.plugins.specs import ref_name


def _default() -> tuple[Resolution | None, str]:
    try:
        return Device.resolve(), ""
    except TolkError as e:
        return None, str(e)


def devices_data(reg: Registry) -> dict[str, Any]:
    """Everything ``tolk devices --json`` prints."""
    res, err = _default()
    rows = []
    for b in reg.backends:
        state, reason = Device.state(b.name) if reg.get(b.name) is b else (b.state, b.reason)  # `lost` if opened
        rows.append({
            "name": b.name, "dist": b.plugin.dist, "version": b.plugin.version, "entry_point": b.plugin.name,
            "state": state, "reason": reason, "hint": b.hint, "priority": b.priority,
            "devices": b.device_count, "aliases": list(b.spec.aliases),
            "renderer": b.renderer.spec.name if b.renderer else None,
            "renderer_ref": ref_name(b.renderer.spec.renderer) if b.renderer else None,
            "graph": b.graph is not None,
            "graph_provider": b.graph.plugin.provider if b.graph else None,
            "default": res is not None and res.device.partition(":")[0] == b.name and b.state == "available",
        })
    plugins = [{"entry_point": p.name, "dist": p.dist, "version": p.version, "value": p.value, "state": p.state,
                "reason": p.reason, "traceback": p.traceback, "import_s": round(p.import_s, 4)} for p in reg.plugins]
    rejected = [{"kind": type(r.spec).__name__, "device": r.spec.device, "provider": r.plugin.provider,
                 "state": r.state, "reason": r.reason} for r in reg.rejected]
    default = ({"device": res.device, "origin": res.origin, "notes": list(res.notes)} if res
               else {"device": None, "error": err})
    collectives = [{"name": c.name, "dist": c.plugin.dist, "version": c.plugin.version, "entry_point": c.plugin.name,
                    "state": c.state, "reason": c.reason, "hint": c.hint, "priority": c.priority,
                    "ops": list(c.spec.ops), "devices": list(c.spec.devices), "persistent": c.spec.persistent,
                    "launcher": c.spec.launcher} for c in reg.collectives]
    return {"default": default, "backends": rows, "plugins": plugins, "rejected": rejected,
            "collectives": collectives}


def format_collectives(rows: list[dict[str, Any]]) -> str:
    """The collectives providers' table of `tolk devices` (best available first is marked `*`)."""
    avail = sorted((c for c in rows if c["state"] == "available"), key=lambda c: (-c["priority"], c["name"]))
    table = [["", "COLLECTIVES", "PROVIDER", "STATE", "PERSISTENT", "DEVICES", "REASON"]]
    for c in rows:
        table.append(["*" if avail and c is avail[0] else "", c["name"], f"{c['dist']} {c['version']}".strip(),
                      c["state"], "yes" if c["persistent"] else "no", ",".join(c["devices"]) or "host",
                      c["reason"] + (f" (fix: {c['hint']})" if c["state"] != "available" and c["hint"] else "")])
    return _table(table)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def format_devices(data: dict[str, Any], verbose: bool = False, checks: dict[str, str] | None = None) -> str:
    head = ["", "NAME", "PROVIDER", "STATE", "RENDERER", "GRAPH", "REASON"]
    if checks is not None:
        head.insert(4, "CHECK")
    rows = [head]
    for b in data["backends"]:
        row = ["*" if b["default"] else "", b["name"], f"{b['dist']} {b['version']}".strip(), b["state"],
               b["renderer"] or "-", f"yes ({b['graph_provider']})" if b["graph"] else "no", b["reason"]]
        if checks is not None:
            row.insert(4, checks.get(b["name"], "-"))
        rows.append(row)
    for p in data["plugins"]:
        if p["state"] in ("broken", "disabled"):
            row = ["", f"({p['entry_point']})", f"{p['dist']} {p['version']}".strip(), p["state"], "-", "-",
                   p["reason"]]
            if checks is not None:
                row.insert(4, "-")
            rows.append(row)
    out = [_table(rows)]
    d = data["default"]
    if d["device"]:
        out.append(f"\ndefault: {d['device']} (from {d['origin']})")
        out += [f"  note: {n}" for n in d["notes"]]
    else:
        out.append(f"\ndefault: none ({d['error']})")
    for line in dict.fromkeys(f"{b['name']}: {b['reason']}; fix: {b['hint']}" for b in data["backends"]
                              if b["state"] != "available" and b["hint"]):
        out.append(line)
    for r in data["rejected"]:
        out.append(f"ignored {r['kind']} for {r['device']} from {r['provider']}: {r['state']}: {r['reason']}")
    if data.get("collectives"):
        out.append("\n" + format_collectives(data["collectives"]))
    if verbose:
        for p in data["plugins"]:
            if p["traceback"]:
                out.append(f"\n--- {p['dist']} ({p['entry_point']}) ---\n{p['traceback']}")
    return "\n".join(out)


def run_checks(reg: Registry) -> dict[str, str]:
    """Each available device's conformance smoke subset (registration and runtime tiers, see
    `tolk_core.testing.checks.smoke`): PASS, or FAIL with the first broken contract."""
    from tolk_core.testing.checks import smoke
    results = {}
    for b in reg.backends:
        if b.state != "available":
            continue
        failed = [c for c in smoke(b.name) if c.ok is False]
        results[b.name] = "PASS" if not failed else f"FAIL: {failed[0].name}: {failed[0].detail}".splitlines()[0]
    return results


def cmd_devices(args: argparse.Namespace) -> int:
    reg = get_registry()
    data = devices_data(reg)
    checks = run_checks(reg) if args.check else None
    if args.json:
        if checks is not None:
            for b in data["backends"]:
                b["check"] = checks.get(b["name"])
        print(json.dumps(data, indent=2))
    else:
        print(format_devices(data, verbose=args.verbose, checks=checks))
    return 1 if checks and any(v.startswith("FAIL") for v in checks.values()) else 0


def config_rows() -> list[list[str]]:
    rows = [["SETTING", "VALUE", "SOURCE"]]
    for name in config.SETTINGS:
        rows.append([name, repr(config.get(name)), str(config.source(name))])
    return rows


def cmd_config(args: argparse.Namespace) -> int:
    print(_table(config_rows()))
    print("\nfiles consulted:")
    for kind, path, status in config.files():
        print(f"  {kind}: {path} ({status})")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    import importlib.metadata as md

    import tolk_core
    print("## tolk doctor (paste this into bug reports)")
    print(f"tolk-core {tolk_core.__version__}, Python {sys.version.split()[0]}, {platform.platform()}")
    for pkg in ("numpy", "pluggy", "pyopencl", "pycuda", "nvidia-cuda-nvrtc"):
        try:
            print(f"  {pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            print(f"  {pkg} not installed")
    reg = get_registry()
    print("\n## devices")
    print(format_devices(devices_data(reg), verbose=True))
    print("\n## config")
    cmd_config(args)
    env_vars = sorted({v for b in reg.backends for v in b.spec.env_vars} |
                      {k for k in os.environ if k.startswith("TOLK_")})
    print("\n## environment")
    for v in env_vars:
        print(f"  {v}={os.environ.get(v, '(unset)')}")
    return 0


def cmd_new_plugin(args: argparse.Namespace) -> int:
    from pathlib import Path

    from tolk_core.scaffold import new_plugin
    files = new_plugin(args.name, Path(args.dir), graph=args.graph)
    root = files[0].parent
    print(f"wrote {root} ({len(files)} files): pip install -e '{root}[test]' && pytest {root / 'tests'}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from tolk_core import demo
    return demo.train_main(args.device, args.steps, args.quick, infer=args.infer)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tolk", description="Tolk: devices, configuration and diagnostics")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("devices", help="list backends with state, reason, renderer, graph and the default")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--check", action="store_true", help="run the conformance smoke checks on each available device")
    p.add_argument("-v", "--verbose", action="store_true", help="show tracebacks of broken plugins")
    p.set_defaults(fn=cmd_devices)
    sub.add_parser("config", help="each effective setting and where it came from").set_defaults(fn=cmd_config)
    sub.add_parser("doctor", help="versions, registry and config sources for bug reports").set_defaults(fn=cmd_doctor)
    p = sub.add_parser("new-plugin", help="write a device plugin distribution that passes the conformance suite")
    p.add_argument("name", help="plugin name: lower case (mydev -> distribution tolk-mydev, device MYDEV)")
    p.add_argument("--graph", action="store_true", help="also supply a Graph (batched replay) for the device")
    p.add_argument("--dir", default=".", help="directory to write tolk-NAME/ into (default: here)")
    p.set_defaults(fn=cmd_new_plugin)
    p = sub.add_parser("demo", help="the main job: train a digits classifier (--infer: MLP and attention inference)")
    p.add_argument("--device", default=None, help="device to run on (default: the configured default)")
    # training demo flags
    p.add_argument("--steps", type=int, default=None, help="training steps (default 300, 60 with --quick)")
    p.add_argument("--quick", action="store_true", help="a short run that does not require 95%% accuracy")
    p.add_argument("--infer", action="store_true", help="run the inference demo instead of training")
    p.set_defaults(fn=cmd_demo)
    from tolk_core.viz.command import add_parser as add_viz  # the viz command's own module (docs/viz.md)
    add_viz(sub)
    from tolk_core.tune.command import add_parser as add_tune  # docs/tuning.md
    add_tune(sub)
    from tolk_core.distributed.launch import add_parser as add_launch  # docs/distributed.md
    add_launch(sub)
    args = parser.parse_args(argv)
    import warnings
    warnings.filterwarnings("ignore", category=PluginWarning)  # the table shows broken plugins itself
    try:
        return args.fn(args)
    except TolkError as e:
        print(f"tolk: error: {e}", file=sys.stderr)
        if os.environ.get("TOLK_TRACEBACK"):
            traceback.print_exc()
        return 2


if __name__ == "__main__":
    sys.exit(main())
