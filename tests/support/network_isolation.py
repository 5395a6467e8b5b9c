"""Run network-using tests inside a private network namespace that has only loopback.

Ray looks for the machine's address by reaching for public DNS servers and then binds every
interface; inside ``unshare --net`` the only interface is ``lo``, so nothing it does can leave
the machine.
"""

from __future__ import annotations

import shlex
import shutil
import socket


def loopback_only() -> bool:
    """True inside a network namespace whose only interface is ``lo``."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def isolated(argv: list[str]) -> list[str]:
    """``argv`` run in a new network namespace with loopback up."""
    if shutil.which("unshare") is None:
        raise RuntimeError("unshare (util-linux) is needed to run these tests without network")
    return ["unshare", "--net", "sh", "-c", f"ip link set lo up && exec {shlex.join(argv)}"]
