"""The built executables and a free loopback port, shared by the tests that run real
goblin-node / goblin-worker / goblin-client processes (tests/python is on sys.path)."""
import os
import socket

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("GOBLIN_BUILD", os.path.join(ROOT, "build"))
TOOLS = os.path.join(BUILD, "tools")
NODE = os.path.join(TOOLS, "goblin-node")
WORKER = os.path.join(TOOLS, "goblin-worker")
CLIENT = os.path.join(TOOLS, "goblin-client")


def needs(*paths):
    """A skip mark for a module whose tests need these executables."""
    names = "/".join(os.path.basename(p) for p in paths)
    return pytest.mark.skipif(not all(os.path.exists(p) for p in paths),
                              reason=f"{names} not built in {TOOLS}")


def free_port():
    """A tcp port on 127.0.0.1 that nothing listens on now."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
