"""Repository-wide pytest configuration: fixture registration only."""

pytest_plugins = ["e2e.cluster.pytest_plugin"]
