"""The one place the distribution's version is written: the build reads it from here
(``[tool.setuptools.dynamic]`` in pyproject.toml) and ``sdk.__version__`` is this value."""

__version__ = "0.1.0"
