"""An example rlmetrics plugin distribution: one family, one backend, one exporter.

Each is its own module behind its own entry point; importing this package declares nothing.
"""

__all__: list[str] = []
