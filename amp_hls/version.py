"""The package version, defined once (pyproject.toml reads it: [tool.hatch.version]). A module of
its own so that any layer can name it without importing the public API above it."""

__version__ = "0.1.0"
