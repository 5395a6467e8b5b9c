"""Run network-using tests inside a private network namespace that has only loopback.

Ray looks for the machine's address by reaching for public DNS servers and then binds every
interface; inside ``unshare --net`` the only interface is ``lo``, so nothing it does can leave
the machine.
"""

from __future__ import annotations

import shutil
import socket
import sys


def loopback_only() -> bool:
    """True inside a network namespace whose only interface is ``lo``."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def isolated_pytest(pytest_args: list[str]) -> list[str]:
    """The argv of ``python -m pytest ARGS`` in a new network namespace with loopback up."""
    if shutil.which("unshare") is None:
        raise RuntimeError("unshare (util-linux) is needed to run these tests without network")
    command = f"ip link set lo up && exec {sys.executable} -m pytest -p no:cacheprovider " + " ".join(pytest_args)
    return ["unshare", "--net", "sh", "-c", command]
