"""The server runs on login nodes without torch: importing all of it must not import torch."""

from __future__ import annotations

import subprocess
import sys


def test_server_never_imports_torch():
    code = (
        "import sys, server.admin, server.main, server.monitor, server.services.submission, server.services.estimate\n"
        "leaked = sorted(name for name in sys.modules if name == 'torch' or name.startswith('torch.'))\n"
        "assert not leaked, leaked\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_server_serves_where_torch_cannot_be_imported(tmp_path):
    """A login node without torch: make every import of torch fail, then serve a request."""
    code = (
        # An import hook rather than sys.modules['torch'] = None: libraries (scipy) look torch up in sys.modules
        # to tell its arrays apart, and on a login node without torch it is simply not there.
        "import importlib.abc, sys\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from pathlib import Path\n"
        "from fastapi.testclient import TestClient\n"
        "from server.config import Settings\n"
        "from server.main import create_app\n"
        f"settings = Settings(database_url='sqlite:///{tmp_path}/db.sqlite', runs_dir=Path('{tmp_path}/runs'),\n"
        "                    auth=False)\n"
        "with TestClient(create_app(settings, start_monitor=True), base_url='http://127.0.0.1') as client:\n"
        "    assert client.get('/api/experiments').json() == {'data': [], 'count': 0}\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_server_help():
    result = subprocess.run([sys.executable, "-m", "server", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "--port" in result.stdout
    assert "SCALELAB_RUNS_DIR" in result.stdout
