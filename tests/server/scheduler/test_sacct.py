"""Reading what sacct prints, without a cluster: Slurm's compressed node lists."""

from __future__ import annotations

import pytest

from server.scheduler.sacct import expand_nodelist


@pytest.mark.parametrize(
    ("node_list", "hosts"),
    [
        ("n[1-3,5],m2", ["n1", "n2", "n3", "n5", "m2"]),
        ("node[08-10]", ["node08", "node09", "node10"]),
        ("vm", ["vm"]),
        ("r[1-2]n[1,3]", ["r1n1", "r1n3", "r2n1", "r2n3"]),
        ("a-1,b[7]", ["a-1", "b7"]),
        ("None assigned", []),
        ("", []),
    ],
)
def test_node_lists_expand_as_scontrol_show_hostnames_does(node_list, hosts):
    assert expand_nodelist(node_list) == hosts


@pytest.mark.parametrize("node_list", ["n[1-3", "n1-3]", "n[a-b]", "n[[1]]"])
def test_unreadable_node_lists_are_refused(node_list):
    with pytest.raises(ValueError, match="node list"):
        expand_nodelist(node_list)
