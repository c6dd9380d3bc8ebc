"""scalelab fabric against the app in-process: the stored probes' fits, filtered, and the API's JSON."""

from __future__ import annotations

import json

from client import cli
from tests.client.helpers import scalelab
from tests.server.api.test_fabric import probe_log


def test_fabric_lists_each_probed_tier_with_its_fit_and_filters(client, capsys):
    assert scalelab(client, capsys, "fabric")[1].splitlines()[-1].strip().startswith("no probe yet")
    files = [{"name": "probe.out", "content": probe_log(2, 2)}]
    assert client.post("/api/imports", json={"name": "a probe", "files": files}).status_code == 201
    code, out, _ = scalelab(client, capsys, "fabric")
    assert code == cli.EXIT_OK
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["TIER", "PROFILE", "PARTITION"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert set(rows) == {"intra_node", "inter_node"}
    # 20 us and 4 GB/s within a node, 100 us and 0.5 GB/s across (the log's fabric, tests/server/api/test_fabric.py).
    assert rows["intra_node"][1:9] == ["-", "-", "2", "2", "gloo", "probe", "20", "4"]
    assert rows["inter_node"][7:9] == ["100", "0.5"]
    assert all(row[9].endswith("%") for row in rows.values())  # the fit's error
    code, out, _ = scalelab(client, capsys, "fabric", "--backend", "nccl")
    assert "no probe yet" in out
    code, out, _ = scalelab(client, capsys, "fabric", "--nodes", "2", "--processes-per-node", "2")
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"intra_node", "inter_node"}
    code, out, _ = scalelab(client, capsys, "fabric", "--processes-per-node", "4")
    assert "no probe yet" in out
    code, out, _ = scalelab(client, capsys, "fabric", "--json")
    assert json.loads(out)["count"] == 2


def test_a_filter_the_server_refuses_is_a_usage_exit(client, capsys):
    code, _, err = scalelab(client, capsys, "fabric", "--profile", "no such; profile")
    assert code != cli.EXIT_OK and "profile" in err
    code, _, err = scalelab(client, capsys, "fabric", "--nodes", "0")
    assert code == cli.EXIT_USAGE and "nodes" in err
