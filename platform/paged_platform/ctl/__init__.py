"""paged-ctl, the admin CLI (console script ``paged-ctl`` -> :func:`main`)."""

from paged_platform.bench.cli import bench
from paged_platform.ctl.commands import app

app.command("bench")(bench)


def main() -> None:
    app()


__all__ = ["app", "main"]
