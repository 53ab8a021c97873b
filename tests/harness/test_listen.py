"""How a launched kernel listens (docs/targets.md): `listen`, `ws_path`, the
{port} and {listen_url} placeholders, the default argv per transport, and
what state.json records so later commands connect the same way."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.sandbox.state import SandboxState, read_state
from harness.sandbox.target import REFKERNEL_ARGV, TargetSpec, load_target, refkernel_spec, spec_from_flags
from harness.wire.transport import Address

VALUES = {
    "bin": "/k", "socket": "/run/k.sock", "llm_url": "http://127.0.0.1:9/v1", "data_dir": "/d", "token": "T",
    "run_dir": "/r", "config": "", "port": "20001", "listen_url": "tcp:127.0.0.1:20001",
}


def test_the_default_argv_says_where_to_listen_by_transport():
    rk = refkernel_spec()
    assert rk.render_argv(VALUES)[:3] == ["/k", "--socket", "/run/k.sock"]
    tcp = replace(rk, listen="tcp")
    assert tcp.render_argv(VALUES)[:3] == ["/k", "--listen", "tcp:127.0.0.1:20001"]
    assert "--socket" not in tcp.render_argv(VALUES)
    ws = replace(rk, listen="ws")
    assert ws.render_argv({**VALUES, "listen_url": "ws://127.0.0.1:20001/"})[:3] == ["/k", "--listen", "ws://127.0.0.1:20001/"]
    # --bin PATH runs the reference kernel's flags: the same swap
    own = replace(spec_from_flags("/bin/true", ("--x",)), listen="tcp")
    assert own.render_argv(VALUES) == ["/k", "--listen", "tcp:127.0.0.1:20001", "--llm-url", VALUES["llm_url"], "--data-dir", "/d", "--x"]  # the token goes by $KSTRESS_TOKEN
    assert rk.argv == REFKERNEL_ARGV  # the spec keeps its template; only the rendering differs


def test_listen_in_a_target_file(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('[target]\nbin = "refkernel"\nlisten = "ws"\nws_path = "/kernel"\n')
    spec = load_target(f)
    assert (spec.listen, spec.ws_path) == ("ws", "/kernel")
    f.write_text('[target]\nbin = "/bin/true"\nlisten = "tcp"\nargv = ["{bin}", "serve", "--port", "{port}"]\n')
    assert load_target(f).render_argv(VALUES) == ["/k", "serve", "--port", "20001"]
    f.write_text('[target]\nbin = "/bin/true"\nlisten = "tcp"\nenv = { KPORT = "{port}" }\n')
    assert load_target(f).render_env(VALUES) == {"KPORT": "20001"}
    f.write_text('[target]\nbin = "/bin/true"\nlisten = "tcp"\n[target.config]\nfile = "k.toml"\ntemplate = "listen = \\"{listen_url}\\""\n')
    assert load_target(f).config_template == 'listen = "{listen_url}"'


@pytest.mark.parametrize(
    "body, words",
    [
        ('listen = "udp"', "listen='udp' is invalid"),
        ('listen = "ws"\nws_path = "kernel"', "ws_path='kernel' is invalid"),
        ('listen = "tcp"\nargv = ["{bin}", "--socket", "{socket}"]', "nothing tells the kernel where: put {port} or {listen_url}"),
        ('argv = ["{bin}", "--port", "{port}"]', "{port} is set only for a kernel that listens on TCP or a WebSocket"),
        ('listen = 7', "listen must be a string"),
    ],
)
def test_bad_listen_settings_name_the_fix(tmp_path, body, words):
    f = tmp_path / "t.toml"
    f.write_text(f'[target]\nbin = "/bin/true"\n{body}\n')
    with pytest.raises(UsageError) as info:
        load_target(f)
    assert words in str(info.value), str(info.value)


def test_listen_url_is_accepted_for_unix_too():
    spec = TargetSpec(bin="/bin/true", argv=("{bin}", "--listen", "{listen_url}"))
    assert spec.render_argv({**VALUES, "listen_url": "unix:/run/k.sock"}) == ["/k", "--listen", "unix:/run/k.sock"]


def _state(tmp_path: Path, **over) -> Path:
    doc = {"status": "ready", "run_dir": str(tmp_path), "socket": str(tmp_path / "kernel.sock"), "token": "T", **over}
    p = tmp_path / "state.json"
    p.write_text(json.dumps(doc))
    return p


def test_state_records_how_to_reach_the_kernel(tmp_path):
    s = read_state(_state(tmp_path))
    assert (s.transport, s.kernel_address()) == ("unix", Address("unix", path=str(tmp_path / "kernel.sock")))  # a state file of before
    conn = str(tmp_path / "connector.sock")
    s = read_state(_state(tmp_path, socket="ws://127.0.0.1:20001/", transport="ws", address="ws://127.0.0.1:20001/", connector=conn))
    assert s.kernel_address() == Address("ws", host="127.0.0.1", port=20001, url_path="/", via=conn)
    assert s.meta()["transport"] == "ws" and s.meta()["address"] == "ws://127.0.0.1:20001/"
    assert isinstance(s, SandboxState)


@pytest.mark.parametrize(
    "over, words",
    [
        ({"transport": "sctp"}, "'transport' is 'sctp'"),
        ({"transport": "tcp", "address": "tcp:127.0.0.1:1"}, "without 'connector'"),
        ({"transport": "tcp", "address": "ws://127.0.0.1:1/", "connector": "/c"}, "transport 'tcp' but address"),
        ({"transport": "tcp", "address": "tcp:10.0.0.1:1", "connector": "/c"}, "not a loopback address"),
    ],
)
def test_a_damaged_state_is_a_usage_error(tmp_path, over, words):
    with pytest.raises(UsageError) as info:
        read_state(_state(tmp_path, **over)).kernel_address()
    assert words in str(info.value), str(info.value)
