"""Prints the requirements an image installs, one per line, for ``pip install -r /dev/stdin``.

Usage: ``python requirements.py PYPROJECT [--extra NAME]... [--without NAME]...`` prints the project's
dependencies plus those of each extra, minus the ``--without`` distributions (installed separately, or not at
all), so the image's dependency layer is cached on pyproject.toml alone and never on the source tree.
``python requirements.py --dist torch --without triton`` prints an installed distribution's own requirements
instead, with their markers evaluated here (for ``pip install --no-deps torch`` followed by these).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def _name(requirement: str) -> str:
    return canonicalize_name(re.split(r"[\s\[<>=!~;@]", requirement.strip(), maxsplit=1)[0])


def project_requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    own = canonicalize_name(project["name"])
    optional = project.get("optional-dependencies", {})
    unknown = sorted(set(extras) - set(optional))
    if unknown:
        raise SystemExit(f"unknown extra(s) {unknown}; pyproject.toml has {sorted(optional)}")
    found = list(project.get("dependencies", []))
    for extra in extras:
        found += [r for r in optional[extra] if _name(r) != own]  # "paged[engine]" inside an extra
    return found


def distribution_requirements(dist: str) -> list[str]:
    """``dist``'s unconditional requirements whose markers hold on this interpreter and platform."""
    found = []
    for line in importlib.metadata.requires(dist) or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            requirement.marker = None
            found.append(str(requirement))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pyproject", nargs="?", help="the project's pyproject.toml")
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group to add")
    parser.add_argument("--dist", help="print this installed distribution's requirements instead")
    parser.add_argument("--without", action="append", default=[], help="a distribution name to leave out")
    args = parser.parse_args()
    if (args.pyproject is None) == (args.dist is None):
        parser.error("give either PYPROJECT or --dist")
    found = distribution_requirements(args.dist) if args.dist else project_requirements(args.pyproject, args.extra)
    without = {canonicalize_name(n) for n in args.without}
    seen = set()
    for requirement in found:
        if _name(requirement) not in without and requirement not in seen:
            seen.add(requirement)
            sys.stdout.write(requirement + "\n")


if __name__ == "__main__":
    main()
