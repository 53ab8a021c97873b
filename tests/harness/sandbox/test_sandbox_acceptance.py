"""The acceptance checks of issue 4 for the sandbox, in all three variants:
root/netns, root/userns and nobody/userns (sbx_checks.py holds the checks)."""

from __future__ import annotations

import sbx_checks


async def test_inside_sees_only_lo_and_it_is_up(runner):
    result = await runner.check("only_lo")
    assert result["inside"] == {"links": ["lo"], "lo_up": True}
    assert result["mechanism"] == runner.mechanism
    assert (result["euid"] != 0) == runner.unprivileged, result["euid"]


def test_links_probe_sees_the_hosts_interfaces_outside():
    # Control for the check above: on the host the same probe finds more than lo.
    host = sbx_checks.links_of_this_namespace()
    assert "lo" in host["links"] and len(host["links"]) > 1, host


async def test_port_8080_inside_does_not_clash_with_the_host(runner):
    result = await runner.check("port_8080")
    assert result["host_reply"] in ("host", None)
    if result["host_bound"]:
        assert result["host_reply"] == "host"


async def test_unix_socket_inside_is_reachable_from_outside(runner):
    result = await runner.check("unix_socket")
    assert result["reply"].startswith("ping from net:[")


async def test_pids_lists_every_process_inside(runner):
    result = await runner.check("pids_all")
    assert result["grandchild"] in result["pids"] and len(result["pids"]) == 4


async def test_aclose_leaves_no_process_namespace_mount_or_lock(runner):
    result = await runner.check("aclose_clean")
    print(f"{runner.variant}: {result['timings']}")


async def test_cancelled_task_inside_async_with_still_cleans_up(runner):
    await runner.check("cancelled")


async def test_a_tcp_port_inside_is_reached_through_the_connector(runner):
    result = await runner.check("connector_dial")
    assert result["refused"] == "refused"
    print(f"{runner.variant}: {result['n']} connections through the connector in {result['dial_s']:.3f} s")
