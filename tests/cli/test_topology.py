"""The topology file through the Python face (docs/topology.md). The engine parses and checks
it (dissectors/src/dedupe/topology.rs, whose own tests cover every error with its line);
these tests check that each error reaches Python as one `TopologyError` line with the file
and the line, and that the CLI's shapes of a topology round-trip."""

from __future__ import annotations

import re

import pytest

from smbwire.errors import TopologyError
from smbwire.topology import Node, Rule, Topology, load_topology, parse_topology

from paths import ROOT

DOCS = ROOT / "docs" / "topology.md"

GOOD = """\
# three-node cluster and one client
[nodes.s2d-a]
addresses = ["198.18.1.1", "198.19.1.1"]

[nodes.s2d-b]
addresses = ["198.18.1.2", "2001:DB8::0:2"]
member = true

[nodes.client]
addresses = ["198.18.0.10"]
member = false

[[rules]]
share = '*\\ClusterStorage$'
class = "replication"

[[rules]]
file = "*.vhdx"
share = '\\\\fs\\vms'
class = "client"
"""


def errmsg(text: str) -> str:
    with pytest.raises(TopologyError) as e:
        parse_topology(text, "topology.toml")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("topology.toml: ")
    return msg


def test_parses_nodes_and_rules():
    t = parse_topology(GOOD)
    assert t.nodes == (
        Node("s2d-a", ("198.18.1.1", "198.19.1.1"), True),
        Node("s2d-b", ("198.18.1.2", "2001:db8::2"), True),  # normalised
        Node("client", ("198.18.0.10",), False),
    )
    assert t.rules == (
        Rule("replication", share="*\\ClusterStorage$"),
        Rule("client", share="\\\\fs\\vms", file="*.vhdx"),
    )


def test_to_config_is_the_engine_shape():
    cfg = parse_topology(GOOD).to_config()
    assert cfg["nodes"][2] == {"name": "client", "addresses": ["198.18.0.10"], "member": False}
    assert cfg["rules"][0] == {"share": "*\\ClusterStorage$", "file": None, "class": "replication"}
    assert Topology.from_config(cfg) == parse_topology(GOOD)


def test_toml_roundtrip_including_awkward_names():
    t = Topology(
        nodes=(Node("node with spaces", ("10.0.0.1",)), Node('q"uote.d', ("::1",), False), Node("é", ("10.0.0.2",))),
        rules=(Rule("redirected-read", file="a\\b*\x7f"),),
    )
    assert parse_topology(t.to_toml()) == t


def test_empty_file_is_an_empty_topology():
    assert parse_topology("") == Topology()
    assert parse_topology("").to_config() == {"nodes": [], "rules": []}


def test_docs_example_is_valid():
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert blocks, "docs/topology.md has no ```toml example"
    for block in blocks:
        t = parse_topology(block, "docs example")
        assert t.nodes


@pytest.mark.parametrize(
    "text,expected",
    [
        ('[nodes.a]\naddresses = ["10.0.0.300"]\n', "line 2: nodes.a.addresses: '10.0.0.300' is not an IP address"),
        ('[nodes.a]\naddresses = ["10.0.0.1/24"]\n', "line 2: nodes.a.addresses: '10.0.0.1/24' has host bits set (did you mean 10.0.0.0/24?)"),
        ('[nodes.a]\naddresses = ["10.0.0.0/24"]\n[nodes.b]\naddresses = ["10.0.0.0/24"]\n',
         "line 4: nodes.b.addresses: range 10.0.0.0/24 is also in node 'a'"),
        ('[nodes.a]\naddresses = [5]\n', "line 2: invalid type: integer `5`, expected a string"),
        ('[nodes.a]\naddresses = []\n', "line 2: nodes.a.addresses: expected a non-empty list of IP addresses"),
        ('[nodes.a]\naddresses = "10.0.0.1"\n', "line 2: invalid type: string \"10.0.0.1\", expected a sequence"),
        ('[nodes.a]\nmember = true\n', "line 1: missing field `addresses`"),
        ('[nodes.a]\naddresses = ["10.0.0.1"]\nmember = "yes"\n', "line 3: invalid type: string \"yes\", expected a boolean"),
        ('[nodes.a]\naddresses = ["10.0.0.1"]\nadresses = ["10.0.0.2"]\n',
         "line 3: unknown field `adresses`, expected `addresses` or `member`"),
        ('[nodes.a]\naddresses = ["10.0.0.1", "10.0.0.1"]\n', "address 10.0.0.1 is twice in this node"),
        ('[node.a]\naddresses = ["10.0.0.1"]\n', "line 1: unknown field `node`, expected `nodes` or `rules`"),
        ("nodes = 5\n", "line 1: invalid type: integer `5`, expected a map"),
        ("[rules]\nclass = 'client'\n", "line 1: invalid type: map, expected a sequence"),
        ("[nodes]\na = 1\n", "line 2: invalid type: integer `1`"),
        ('[[rules]]\nshare = "x"\nclass = "replicaton"\n',
         "line 3: rules.0.class: unknown class 'replicaton' (expected one of: redirection, replication, "
         "redirected-read, client)"),
        ('[[rules]]\nshare = "x"\n', "line 1: missing field `class`"),
        ('[[rules]]\nclass = "client"\n', "line 1: rules.0: a rule needs 'share' or 'file'"),
        ('[[rules]]\nshare = "a"\nclass = "client"\n[[rules]]\nfile = ""\nclass = "client"\n',
         "line 5: rules.1.file: empty glob pattern"),
        ('[[rules]]\nfile = "disk[0-9.vhdx"\nclass = "client"\n',
         "line 2: rules.0.file: invalid glob 'disk[0-9.vhdx': unclosed character class"),
        ('[[rules]]\nshare = "a"\nclass = "client"\nfiles = "*.vhdx"\n', "line 4: unknown field `files`"),
        ('[nodes."my.node"]\naddresses = ["10.0.0.1"]\nmember = 1\n', "line 3: invalid type: integer `1`, expected a boolean"),
        ("[nodes.a]\naddresses = [\"10.0.0.1\"\n", "(TOML syntax)"),
        ("[nodes.a]\naddresses = 10.0.0.1\n", "line 2, column"),
    ],
)
def test_invalid_topologies_are_one_clear_line(text, expected):
    assert expected in errmsg(text)


def test_address_in_two_nodes_names_both_and_the_line():
    text = '[nodes.a]\naddresses = ["10.0.0.1"]\n\n[nodes.b]\naddresses = ["10.0.0.2", "10.0.0.1"]\n'
    assert errmsg(text) == "topology.toml: line 5: nodes.b.addresses: address 10.0.0.1 is also in node 'a'"


def test_address_in_two_nodes_after_normalisation():
    text = '[nodes.a]\naddresses = ["2001:db8::1"]\n[nodes.b]\naddresses = ["2001:0DB8:0:0::1"]\n'
    assert "address 2001:db8::1 is also in node 'a'" in errmsg(text)


def test_from_config_rejects_duplicate_names_and_junk():
    with pytest.raises(TopologyError, match="node name 'a' is listed twice"):
        Topology.from_config({"nodes": [{"name": "a", "addresses": ["10.0.0.1"]},
                                        {"name": "a", "addresses": ["10.0.0.2"]}]})
    with pytest.raises(TopologyError, match="expected an object"):
        Topology.from_config([1, 2])
    with pytest.raises(TopologyError, match="unknown field `extra`"):
        Topology.from_config({"nodes": [], "extra": 1})


def test_the_engine_is_the_one_validator():
    """Python keeps no rule of its own: the class names a rule may use are the engine's."""
    import smbwire.topology as topology
    from smbwire.tables import traffic_classes

    assert not hasattr(topology, "CLASSES")
    for c in traffic_classes():
        text = f'[[rules]]\nfile = "*"\nclass = "{c["name"]}"\n'
        if c["rule"]:
            assert parse_topology(text).rules[0].cls == c["name"]
        else:
            with pytest.raises(TopologyError, match=f"unknown class '{c['name']}'"):
                parse_topology(text)


def test_load_topology_file_errors(tmp_path):
    good = tmp_path / "topology.toml"
    good.write_text(GOOD, encoding="utf-8")
    assert load_topology(good) == parse_topology(GOOD)

    with pytest.raises(TopologyError, match=r"nope\.toml: no such file$"):
        load_topology(tmp_path / "nope.toml")
    with pytest.raises(TopologyError, match="is a directory"):
        load_topology(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b'[nodes.a]\naddresses = ["\xff"]\n')
    with pytest.raises(TopologyError, match=r"bin\.toml: line 2: not UTF-8 text"):
        load_topology(binary)
    bad = tmp_path / "bad.toml"
    bad.write_text('[nodes.a]\naddresses = ["1.2.3.4.5"]\n', encoding="utf-8")
    with pytest.raises(TopologyError) as e:
        load_topology(bad)
    assert str(e.value) == f"{bad}: line 2: nodes.a.addresses: '1.2.3.4.5' is not an IP address or a range (ADDRESS/PREFIX)"
