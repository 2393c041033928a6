"""sdk: what applications import (producers, consumers, brokers), the CLI and the benchmarks.

Importing ``sdk`` never imports the CLI, aiohttp's server side or pyspark.
"""
