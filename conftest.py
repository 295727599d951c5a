"""Repository-wide pytest configuration: fixture registration, and the check that marks say what a test needs."""

pytest_plugins = ["e2e.cluster.pytest_plugin", "tests.markers"]
