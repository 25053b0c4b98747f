"""A real `weir serve` process per test (WEIR_BIN, default target/debug/weir)."""

import os
import pathlib
import socket
import subprocess
import time

import pytest

import weir

ROOT = pathlib.Path(__file__).resolve().parents[2]
WEIR = os.environ.get("WEIR_BIN", str(ROOT / "target" / "debug" / "weir"))


def free_address() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{probe.getsockname()[1]}"


@pytest.fixture
def broker(tmp_path):
    address = free_address()
    # Plugin calls may run long on a loaded test machine (deadlines have their own tests).
    config = tmp_path / "weir.toml"
    config.write_text("[plugins]\ncall_deadline_ms = 2000\n")
    process = subprocess.Popen([WEIR, "serve", "--data-dir", str(tmp_path / "data"), "--listen", address,
                                "--config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while True:
        try:
            weir.Admin(address).list_topics()
            break
        except weir.WeirError:
            assert process.poll() is None, "the broker exited"
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.1)
    yield address
    process.terminate()
    process.wait(timeout=20)
