"""A page in headless Chromium, driven over the DevTools protocol: what the page lays out where
(``evaluate``) and what it draws (``screenshot``), which ``--dump-dom`` cannot tell. Standard
library only: one WebSocket to the page, text frames, one call at a time."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--remote-allow-origins=*",
]


class ChromiumPage:
    """``url`` open in a ``width`` x ``height`` window of a fresh profile; a context manager that
    stops the browser on exit."""

    def __init__(self, chromium: str, url: str, profile: Path, port: int, width: int, height: int):
        self.process = subprocess.Popen(
            [
                chromium,
                *FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                f"--remote-debugging-port={port}",
                url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.calls = 0
        try:
            self.socket = _connect(_page_socket_url(port, deadline=time.monotonic() + 60))
            # the window's size is not the page's: headless Chromium keeps some of it for itself
            self.call(
                "Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False
            )
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ChromiumPage:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "socket", None) is not None:
            self.socket.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.calls += 1
        _send(self.socket, json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:  # events come in between; this page enables no domain, so few
            message = json.loads(_receive(self.socket))
            if message.get("id") == self.calls:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 90) -> Any:
        """The expression's value once it is truthy, polled every half second."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"not true after {timeout} s: {expression[:200]}")
            time.sleep(0.5)
        return value

    def settled(self, expression: str, timeout: float = 30) -> Any:
        """The expression's value once two reads a second apart agree: a panel that opens late
        (MLflow's Assistant) narrows the page after it first draws."""
        deadline, value = time.monotonic() + timeout, self.evaluate(expression)
        while True:
            time.sleep(1)
            again = self.evaluate(expression)
            if again == value or time.monotonic() > deadline:
                return again
            value = again

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))


def _page_socket_url(port: int, deadline: float) -> str:
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                pages = [t for t in json.load(response) if t["type"] == "page"]
            if pages:
                return pages[0]["webSocketDebuggerUrl"]
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"Chromium's DevTools did not answer on port {port}")
        time.sleep(0.2)


def _connect(url: str) -> socket.socket:
    """The WebSocket handshake (RFC 6455) on ``ws://host:port/path``."""
    host_port, _, path = url.removeprefix("ws://").partition("/")
    host, _, port = host_port.partition(":")
    sock = socket.create_connection((host, int(port)), timeout=120)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        f"GET /{path} HTTP/1.1\r\nHost: {host_port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    if b" 101 " not in head.split(b"\r\n", 1)[0]:
        raise ConnectionError(head.decode(errors="replace"))
    return sock


def _send(sock: socket.socket, text: str) -> None:
    data, mask = text.encode(), os.urandom(4)
    size = len(data)
    header = bytes([0x81]) + (
        bytes([0x80 | size])
        if size < 126
        else bytes([0x80 | 126]) + struct.pack(">H", size)
        if size < 1 << 16
        else bytes([0x80 | 127]) + struct.pack(">Q", size)
    )
    sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("Chromium closed the DevTools socket")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(sock: socket.socket) -> str:
    """One message: a text frame and its continuations (the server's frames are not masked)."""
    parts = []
    while True:
        first, second = _exactly(sock, 2)
        size = second & 0x7F
        if size == 126:
            size = struct.unpack(">H", _exactly(sock, 2))[0]
        elif size == 127:
            size = struct.unpack(">Q", _exactly(sock, 8))[0]
        parts.append(_exactly(sock, size))
        if first & 0x80:  # FIN
            return b"".join(parts).decode()
