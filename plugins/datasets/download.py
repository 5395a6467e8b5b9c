"""``--download``: fetch a dataset torchvision can fetch, with torchvision's own downloader.

Off by default (a machine without a network says where to put the files instead). On, the
dataset class is built with ``download=True`` into the folder it will be read from: torchvision
fetches from its mirrors with a progress bar, checks each file's md5 against the checksums it
ships, and extracts. One process downloads at a time per folder (a sweep's workers may all ask at
once); the others wait and find the files there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from initmem_core.errors import ConfigError


def fetch(dataset_class: Any, root: Path, name: str, homepage: str) -> None:
    """Download ``dataset_class``'s files into ``root``; ``ConfigError`` in one line when it cannot."""
    from filelock import FileLock

    root.mkdir(parents=True, exist_ok=True)
    with FileLock(root / ".initmem-download.lock"):
        try:
            for train in (True, False):
                dataset_class(str(root), train=train, download=True)
        except Exception as error:  # no network, a mirror down, a checksum that does not match
            reason = " ".join(str(error).split()) or type(error).__name__
            raise ConfigError(
                f"{name}: the download into {root} failed ({reason}); try again, or download the files "
                f"by hand from {homepage} and pass --data-dir"
            ) from None
