"""``python -m e2e.soak [--duration 600] [--json out.json]``: start a tiny-model server, soak it, print figures.

Exits 1 when a pass criterion is missed (listed on stderr). Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from e2e.soak import MAX_MODEL_LEN, SERVER_ARGS
from e2e.soak.run import SoakConfig, failures, run_soak
from e2e.soak.workload import Limits
from tests.server.conftest import ADMIN_TOKEN, API_KEY, MODEL_NAME, build_tiny_gemma, start_server


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of soak after the probe")
    parser.add_argument("--probe", type=float, default=20.0, help="seconds of the capacity probe")
    parser.add_argument("--load-factor", type=float, default=0.9, help="offered rate / measured capacity")
    parser.add_argument("--max-concurrency", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
        for folder in ("model", "logs"):
            (Path(tmp) / folder).mkdir()
        model = build_tiny_gemma(Path(tmp) / "model")
        server = start_server(model, Path(tmp) / "logs", *SERVER_ARGS, "--api-key", API_KEY,
                              "--admin-token", ADMIN_TOKEN)  # fmt: skip
        try:
            config = SoakConfig(
                server.url, Limits(MAX_MODEL_LEN, MODEL_NAME), {"api": server.process.pid, "core": server.core_pid()},
                duration_s=args.duration, seed=args.seed, probe_s=args.probe, load_factor=args.load_factor,
                max_concurrency=args.max_concurrency, api_key=API_KEY, admin_token=ADMIN_TOKEN,
            )  # fmt: skip
            report = run_soak(config)
        finally:
            code = server.stop()
        figures = {**report.summary(), "server_exit_code": code, "cpu": platform.processor() or platform.machine(),
                   "cores": os.cpu_count(), "load_average": os.getloadavg()}  # fmt: skip
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    problems = failures(report) + ([f"server exited with {code}"] if code != 0 else [])
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
