"""Stage 2: the CUDA op tests (kernels, FlashAttention 4, graph replay, no host sync) against the reference."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

from common import REPO, parser, write_result

TESTS = ["tests/kernels/test_cuda_ops.py", "tests/kernels/test_flash_adapter.py"]


def main() -> None:
    import pytest

    args = parser(__doc__.split("\n\n")[0]).parse_args()
    report = args.out / "02-cuda-ops.xml"
    rc = pytest.main(["-q", "-p", "no:cacheprovider", "-o", "addopts=-ra", f"--rootdir={REPO}",
                      f"--junitxml={report}", *[str(REPO / t) for t in TESTS]])  # fmt: skip
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    write_result(
        args.out, "02-cuda-ops", "pass" if rc == 0 and passed > 0 else "fail",
        f"{passed} passed, {counts['failures'] + counts['errors']} failed, {counts['skipped']} skipped",
        passed=passed, **counts,
    )  # fmt: skip
    sys.exit(int(rc))


if __name__ == "__main__":
    main()
