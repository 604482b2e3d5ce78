"""Generated gRPC code of the sandboxd.v1 wire contract (proto/sandboxd/v1/sandbox.proto).

Regenerate with `python clients/python/regen.py`; never edit by hand.
"""
