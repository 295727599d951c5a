"""The check's final table, from ``stages.tsv`` (name, exit code, seconds) and each stage's JSON result."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    out = Path(sys.argv[1])
    lines = ["| stage | status | s | result |", "|---|---|---:|---|"]
    peaks = []
    for row in (out / "stages.tsv").read_text().splitlines():
        name, rc, seconds = row.split("\t")
        result_file = out / f"{name}.json"
        if result_file.exists():
            result = json.loads(result_file.read_text())
            status, note = result["status"], result["note"]
            peak = result["figures"].get("peak_gpu_mib")
            if peak:
                peaks.append(f"{name} {peak:,.0f} MiB")
        else:
            status, note = ("timeout" if rc in ("124", "137") else "fail"), f"exit {rc}, no result (see {name}.log)"
        lines.append(f"| {name} | {status} | {seconds} | {note} |")
    lines.append(f"| 07-peak-memory | info | | {'; '.join(peaks) or 'no GPU figures'} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
