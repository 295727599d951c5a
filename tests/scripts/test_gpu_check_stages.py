"""The GPU check's stage scripts, run on the CPU in their ``--smoke`` mode (a tiny model with Gemma 3's switches),
so a change to the engine's API that would break them breaks here, not in a scarce GPU slot. What they measure
needs a GPU; here each must run to its end and write a result the summary table reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# script -> the result it writes
STAGES = {
    "greedy": "03-greedy", "quality": "04-bf16-quality", "bandwidth": "05-bandwidth", "throughput": "06-throughput",
}  # fmt: skip


def run_stage(script: str, out: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join([str(REPO / "engine"), str(REPO), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gpu_check" / f"{script}.py"), "--out", str(out), "--smoke"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip


def test_stages_run_on_the_cpu_and_the_summary_reads_them(tmp_path) -> None:
    for script in STAGES:
        proc = run_stage(script, tmp_path)
        assert proc.returncode == 0, f"{script}: {proc.stderr[-3000:]}"
    results = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in STAGES.values()}
    assert results["03-greedy"]["status"] == "pass"  # CPU against CPU: any difference is a bug in the script
    assert 0.9 <= results["04-bf16-quality"]["figures"]["agreement"] <= 1.0
    assert results["05-bandwidth"]["status"] == "skip"
    throughput = results["06-throughput"]["figures"]
    assert all(throughput[k]["output_tok_s"] > 0 for k in ("w1_eager", "w1_graphs", "small_eager", "small_graphs"))
    stages = "".join(f"{name}\t0\t1\n" for name in STAGES.values()) + "01-build\t124\t150\n"
    (tmp_path / "stages.tsv").write_text(stages)
    table = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check" / "summary.py"), str(tmp_path)],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert "| 03-greedy | pass |" in table and "| 01-build | timeout |" in table and "07-peak-memory" in table
