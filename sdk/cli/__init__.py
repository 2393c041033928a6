"""The ``quiver`` command line (``sdk.cli.main:main``); nothing else imports it.

Command groups live in one module each (``store_cmd``, ``produce_cmd``, ``read_cmd``); shared
conventions are in :mod:`sdk.cli.common`.
"""
