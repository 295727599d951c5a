"""Stage 0: check every import the check needs before anything runs; install what is missing from the wheels
shipped alongside (``wheels.sh`` builds that folder), never from the network; record the machine."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
from pathlib import Path

from common import parser, write_result

# module -> distribution. The target machine has torch, transformers and triton; the engine's server-side
# dependencies (msgspec, pyzmq, fastapi, ...) and the test tools are what usually lack.
REQUIRED = {
    "torch": "torch", "numpy": "numpy", "transformers": "transformers", "safetensors": "safetensors",
    "tokenizers": "tokenizers", "jinja2": "jinja2", "msgspec": "msgspec", "zmq": "pyzmq", "fastapi": "fastapi",
    "uvicorn": "uvicorn", "prometheus_client": "prometheus-client", "opentelemetry.sdk": "opentelemetry-sdk",
    "httpx": "httpx", "yaml": "pyyaml", "pytest": "pytest", "ninja": "ninja",
}  # fmt: skip


def missing() -> list[str]:
    absent = []
    for module, dist in REQUIRED.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is absent
            found = False
        if not found:
            absent.append(dist)
    return absent


def main() -> None:
    p = parser(__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, help="folder of wheels to install missing packages from")
    args = p.parse_args()
    absent = missing()
    installed: list[str] = []
    if absent and args.wheels and args.wheels.is_dir():
        cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--find-links", str(args.wheels), *absent]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=False)
        importlib.invalidate_caches()
        installed, absent = absent, missing()
        installed = [d for d in installed if d not in absent]
    machine: dict[str, object] = {"python": sys.version.split()[0]}
    if "torch" not in absent:
        import torch

        machine.update(torch=torch.__version__, cuda=torch.version.cuda, gpu_visible=torch.cuda.is_available())
        if torch.cuda.is_available():
            machine.update(gpu=torch.cuda.get_device_name(), capability=list(torch.cuda.get_device_capability()))
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine"))
    if not absent:
        from paged_engine.attention.flash import load_flash_attention

        flash = load_flash_attention()
        machine["flash_attention"] = flash if isinstance(flash, str) else f"flash-attn-4 {flash.version}"
    ok = not absent and (args.smoke or machine.get("gpu_visible"))
    note = f"missing: {', '.join(absent)}" if absent else ("no GPU visible to torch" if not ok else "all imports")
    write_result(args.out, "00-preflight", "pass" if ok else "fail", note, installed=installed, **machine)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
