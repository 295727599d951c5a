"""paged-ctl, the admin CLI (console script ``paged-ctl`` -> :func:`main`)."""

from paged_platform.ctl.commands import app


def main() -> None:
    app()


__all__ = ["app", "main"]
