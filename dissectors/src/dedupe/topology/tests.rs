use super::*;
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn listed_nodes_and_clients() {
    let mut t = Topology::from_json(&json!({
        "nodes": [
            {"name": "n1", "addresses": ["198.18.0.1", "2001:db8::1"], "member": true},
            {"name": "n2", "addresses": ["198.18.0.2"]},
            {"name": "c", "addresses": ["198.18.0.9"], "member": false}
        ]
    }))
    .unwrap();
    let n1 = t.node_of(ip("198.18.0.1"));
    assert_eq!(t.node_of(ip("2001:db8::1")), n1);
    assert_eq!(
        t.node_of(ip("::ffff:198.18.0.1")),
        n1,
        "v4-mapped v6 is the same address"
    );
    assert_eq!(t.node(n1).name, "n1");
    let n2 = t.node_of(ip("198.18.0.2"));
    assert!(t.node(n2).member, "member defaults to true");
    let c = t.node_of(ip("198.18.0.9"));
    assert!(!t.node(c).member);
    let auto = t.node_of(ip("198.18.1.1"));
    assert_eq!(t.node(auto).name, "198.18.1.1");
    assert!(
        !t.node(auto).member,
        "unlisted address is a client when nodes are listed"
    );
    assert_eq!(t.node_of(ip("198.18.1.1")), auto);
    assert_eq!(t.nodes().len(), 4);
}

#[test]
fn empty_topology_leaves_membership_unknown_unless_assumed() {
    let mut t = Topology::from_json(&json!({})).unwrap();
    let a = t.node_of(ip("198.18.0.1"));
    let b = t.node_of(ip("198.18.0.2"));
    assert_ne!(a, b);
    assert!(!t.membership_known());
    assert_eq!(t.membership(), "unknown");
    assert!(!t.node(a).member && !t.node(b).member);

    let mut t = Topology::from_json(&json!({"assume_members": true})).unwrap();
    let a = t.node_of(ip("198.18.0.1"));
    let b = t.node_of(ip("198.18.0.2"));
    assert!(t.membership_known());
    assert_eq!(t.membership(), "assumed");
    assert!(t.node(a).member && t.node(b).member);
    // A rules-only topology still lists no nodes.
    let mut t = Topology::from_json(&json!({"rules": [{"file": "*.vhdx", "class": "client"}], "assume_members": true}))
        .unwrap();
    let a = t.node_of(ip("198.18.0.1"));
    assert!(t.node(a).member);
    // Listed nodes: membership known, unlisted addresses are clients.
    let mut t = Topology::from_json(&json!({"nodes": [{"name": "n1", "addresses": ["198.18.0.1"]}]})).unwrap();
    assert_eq!(t.membership(), "topology");
    let c = t.node_of(ip("198.18.0.9"));
    assert!(!t.node(c).member);
}

#[test]
fn ranges_map_addresses_longest_prefix_first() {
    let text = r#"
[nodes.rack]
addresses = ["198.18.0.0/16"]

[nodes.n1]
addresses = ["198.18.1.0/24", "2001:db8::/64"]

[nodes.special]
addresses = ["198.18.1.7"]
member = false
"#;
    let mut t = Topology::from_toml(text).unwrap();
    let name = |t: &mut Topology, a: &str| {
        let i = t.node_of(ip(a));
        t.node(i).name.clone()
    };
    assert_eq!(name(&mut t, "198.18.1.5"), "n1");
    assert_eq!(name(&mut t, "198.18.1.7"), "special");
    assert_eq!(name(&mut t, "198.18.200.1"), "rack");
    assert_eq!(name(&mut t, "2001:db8::1234"), "n1");
    assert_eq!(name(&mut t, "::ffff:198.18.1.9"), "n1");
    // Outside every range: an automatic client node.
    assert_eq!(name(&mut t, "198.19.0.1"), "198.19.0.1");
    assert_eq!(name(&mut t, "2001:db9::1"), "2001:db9::1");
    // The ranges survive the round trip through both forms.
    let back = Topology::from_toml(&t.to_toml()).unwrap();
    assert_eq!(back.config_json(), t.config_json());
    assert_eq!(Topology::from_json(&t.config_json()).unwrap().config_json(), t.config_json());
    assert_eq!(t.config_json()["nodes"][1]["addresses"], json!(["198.18.1.0/24", "2001:db8::/64"]));
}

#[test]
fn bad_ranges_name_the_line() {
    let cases = [
        ("[nodes.a]\naddresses = [\"198.18.0.1/24\"]\n", "line 2: nodes.a.addresses: '198.18.0.1/24' has host bits set (did you mean 198.18.0.0/24?)"),
        ("[nodes.a]\naddresses = [\"198.18.0.0/33\"]\n", "line 2: nodes.a.addresses: '198.18.0.0/33': prefix length must be 0 to 32"),
        ("[nodes.a]\naddresses = [\"198.18.0.x/24\"]\n", "line 2: nodes.a.addresses: '198.18.0.x/24': '198.18.0.x' is not an IP address"),
        ("[nodes.a]\naddresses = [\"198.18.0.0/24\"]\n[nodes.b]\naddresses = [\"198.18.0.0/24\"]\n", "line 4: nodes.b.addresses: range 198.18.0.0/24 is also in node 'a'"),
    ];
    for (text, want) in cases {
        let err = Topology::from_toml(text).expect_err(text).to_string();
        assert!(err.starts_with(want), "{text:?}\n got: {err}\nwant: {want}");
    }
}

#[test]
fn automatic_nodes_are_capped() {
    let mut t = Topology::default();
    t.set_auto_node_cap(3);
    let ids: Vec<NodeIdx> = (1..=10)
        .map(|i| t.node_of(ip(&format!("198.18.0.{i}"))))
        .collect();
    assert_eq!(t.nodes().len(), 4);
    assert_eq!(t.node(ids[3]).name, OVERFLOW_NODE);
    assert!(ids[3..].iter().all(|&i| i == ids[3]));
    assert_eq!(t.overflow_lookups(), 7);
    assert_eq!(
        t.node_of(ip("198.18.0.2")),
        ids[1],
        "addresses seen before the cap keep their node"
    );
}

#[test]
fn rules_match_case_insensitive_globs() {
    let t = Topology::from_json(&json!({
        "rules": [
            // The pattern is `*\csv$*` (one backslash; `\` is not an escape in globs).
            {"share": "*\\csv$*", "file": "*.vhdx", "class": "redirection"},
            {"file": "backup?.bin", "class": "client"},
            {"share": "\\\\sofs\\*", "class": "replication"}
        ]
    }))
    .unwrap();
    assert_eq!(
        t.rule_class(Some(r"\\SRV\CSV$"), Some(r"vm\Disk.VHDX")),
        Some(Class::Redirection)
    );
    assert_eq!(
        t.rule_class(Some(r"\\srv\csv$\x"), Some("a.vhdx")),
        Some(Class::Redirection)
    );
    assert_eq!(t.rule_class(Some(r"\\srv\data"), Some("a.vhdx")), None);
    assert_eq!(
        t.rule_class(Some(r"\\srv\xcsv$"), Some("a.vhdx")),
        None,
        "backslash is literal"
    );
    assert_eq!(
        t.rule_class(None, Some("a.vhdx")),
        None,
        "share pattern needs a known share"
    );
    assert_eq!(t.rule_class(None, Some("BACKUP7.bin")), Some(Class::Client));
    assert_eq!(t.rule_class(None, Some("backup77.bin")), None);
    assert_eq!(
        t.rule_class(Some(r"\\sofs\x"), None),
        Some(Class::Replication)
    );
    assert_eq!(t.rule_class(Some(r"\\sofs"), None), None);
}

#[test]
fn glob_edge_cases() {
    let m = |p: &str, t: &str| Glob::new(p).unwrap().matches(t);
    assert!(m("*", ""));
    assert!(m("a*b*c", "aXbYbZc"));
    assert!(!m("a*b*c", "aXbYbZ"));
    assert!(m("?*?", "ab"));
    assert!(!m("?*?", "a"));
    assert!(m("**a", "a"));
    assert!(m("*", "a\\b"), "* crosses backslashes");
    assert!(m("*", "a/b"), "and slashes");
    assert!(m("a?b", "a\\b"));
    assert!(m("disk[0-9].vhdx", "DISK7.vhdx"));
    assert!(!m("disk[0-9].vhdx", "diskx.vhdx"));
    assert!(m("disk[!0-9].vhdx", "diskx.vhdx"));
    assert!(m("disk[^0-9].vhdx", "diskx.vhdx"));
    assert!(m("[]x]", "]"));
    assert!(m("[*]", "*"), "a set makes a metacharacter literal");
    assert!(!m("[*]", "a"));
    assert!(m("[A-C]", "b"), "sets fold case too");
    assert!(m("*.{vhdx,avhdx}", "a.AVHDX"));
    assert!(m("ä*", "Ä.bin"), "case folding is Unicode");
    assert!(m(r"\\srv\share", r"\\SRV\Share"), "backslash is literal");
    assert!(!m(r"\*", "x"), "not an escape");
    // Pathological pattern stays fast (no exponential backtracking).
    let text = "a".repeat(2000);
    assert!(!m(&format!("{}b", "*a".repeat(50)), &text));
    for bad in ["", "[ab", "[z-a]", "{a,b", "a}"] {
        assert!(Glob::new(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn invalid_config_objects_are_refused_with_a_message() {
    let bad = [
        (json!([]), "expected an object"),
        (json!({"node": []}), "unknown field `node`"),
        (json!({"nodes": {}}), "invalid type"),
        (json!({"nodes": [{"addresses": ["198.18.0.1"]}]}), "missing field `name`"),
        (json!({"nodes": [{"name": "a", "addresses": ["x"]}]}), "not an IP address"),
        (json!({"nodes": [{"name": "a", "addresses": ["198.18.0.1"], "member": "yes"}]}), "invalid type"),
        (json!({"nodes": [{"name": "a", "addresses": "198.18.0.1"}]}), "invalid type"),
        (json!({"nodes": [{"name": "a", "addresses": []}]}), "non-empty list"),
        (
            json!({"nodes": [{"name": "a", "addresses": ["198.18.0.1"]}, {"name": "b", "addresses": ["198.18.0.1"]}]}),
            "also in node 'a'",
        ),
        (
            json!({"nodes": [{"name": "a", "addresses": ["198.18.0.1"]}, {"name": "a", "addresses": ["198.18.0.2"]}]}),
            "twice",
        ),
        (json!({"rules": [{"class": "client"}]}), "'share' or 'file'"),
        (json!({"rules": [{"file": "*", "class": "mirror"}]}), "unknown class"),
        (json!({"rules": [{"file": 3, "class": "client"}]}), "invalid type"),
        (json!({"rules": [{"file": "", "class": "client"}]}), "empty glob"),
        (json!({"rules": [{"file": "*"}]}), "missing field `class`"),
    ];
    for (v, want) in bad {
        let err = Topology::from_json(&v).expect_err(&v.to_string()).to_string();
        assert!(err.contains(want), "{v}: {err}");
    }
}

const GOOD: &str = r#"# three nodes and a client
[nodes.s2d-a]
addresses = ["198.18.1.1", "198.19.1.1"]

[nodes.s2d-b]
addresses = ["198.18.1.2", "2001:DB8::0:2"]
member = true

[nodes."rack 1.client"]
addresses = ["198.18.0.10"]
member = false

[[rules]]
share = '*\ClusterStorage$'
class = "replication"

[[rules]]
file = "*.vhdx"
share = '\\fs\vms'
class = "client"
"#;

#[test]
fn toml_file_parses_and_round_trips() {
    let t = Topology::from_toml(GOOD).unwrap();
    let cfg = t.config_json();
    assert_eq!(
        cfg,
        json!({
            "nodes": [
                {"name": "s2d-a", "addresses": ["198.18.1.1", "198.19.1.1"], "member": true},
                {"name": "s2d-b", "addresses": ["198.18.1.2", "2001:db8::2"], "member": true},
                {"name": "rack 1.client", "addresses": ["198.18.0.10"], "member": false},
            ],
            "rules": [
                {"share": r"*\ClusterStorage$", "file": null, "class": "replication"},
                {"share": r"\\fs\vms", "file": "*.vhdx", "class": "client"},
            ]
        })
    );
    assert_eq!(Topology::from_json(&cfg).unwrap().config_json(), cfg);
    let again = Topology::from_toml(&t.to_toml()).unwrap();
    assert_eq!(again.config_json(), cfg, "{}", t.to_toml());
    assert_eq!(t.rule_class(Some(r"\\S2D\clusterstorage$"), None), Some(Class::Replication));
    assert_eq!(Topology::from_toml("").unwrap().config_json(), json!({"nodes": [], "rules": []}));
    // Awkward names and patterns survive the round trip.
    let odd = Topology::from_json(&json!({
        "nodes": [{"name": "q\"uote.d é", "addresses": ["::1"], "member": false}],
        "rules": [{"file": "a\\b*\u{7f}", "class": "redirected-read"}]
    }))
    .unwrap();
    assert_eq!(Topology::from_toml(&odd.to_toml()).unwrap().config_json(), odd.config_json());
}

/// Every error names the line it is about.
#[test]
fn toml_errors_name_the_line() {
    let cases = [
        ("[nodes.a]\naddresses = [\"10.0.0.300\"]\n", "line 2: nodes.a.addresses: '10.0.0.300' is not an IP address"),
        ("[[rules]]\nshare = \"x\"\nclass = \"write\"\n", "line 3: rules.0.class: unknown class 'write' (expected one of: redirection, replication, redirected-read, client)"),
        ("[nodes.a]\naddresses = []\n", "line 2: nodes.a.addresses: expected a non-empty list of IP addresses"),
        ("[nodes.a]\n\naddresses = [\n  \"10.0.0.1\",\n  \"10.0.0.1\",\n]\n", "line 5: nodes.a.addresses: address 10.0.0.1 is twice in this node"),
        ("[nodes.a]\naddresses = [\"10.0.0.1\"]\n\n[nodes.b]\naddresses = [\"10.0.0.2\", \"10.0.0.1\"]\n", "line 5: nodes.b.addresses: address 10.0.0.1 is also in node 'a'"),
        ("[nodes.a]\naddresses = [\"10.0.0.1\"]\nadresses = [\"10.0.0.2\"]\n", "line 3: unknown field `adresses`, expected `addresses` or `member`"),
        ("[node.a]\naddresses = [\"10.0.0.1\"]\n", "line 1: unknown field `node`"),
        ("[nodes.a]\naddresses = [\"10.0.0.1\"]\nmember = \"yes\"\n", "line 3: invalid type: string \"yes\", expected a boolean"),
        ("[nodes.a]\nmember = true\n", "line 1: missing field `addresses`"),
        ("[[rules]]\nshare = \"x\"\nclass = \"replicaton\"\n", "line 3: rules.0.class: unknown class 'replicaton' (expected one of: redirection, replication, redirected-read, client)"),
        ("[[rules]]\nclass = \"client\"\n", "line 1: rules.0: a rule needs 'share' or 'file' (or both)"),
        ("[[rules]]\nshare = \"a\"\nclass = \"client\"\n\n[[rules]]\nfile = \"\"\nclass = \"client\"\n", "line 6: rules.1.file: empty glob pattern"),
        ("[[rules]]\nshare = \"a\"\nclass = \"client\"\n\n[[rules]]\nfile = \"disk[0-9.vhdx\"\nclass = \"client\"\n", "line 6: rules.1.file: invalid glob 'disk[0-9.vhdx': unclosed character class"),
        ("[[rules]]\nshare = \"a\"\nclass = \"client\"\nfiles = \"*.vhdx\"\n", "line 4: unknown field `files`"),
        ("[nodes.a]\naddresses = [\"10.0.0.1\"\n", "line 2, column 24: unclosed array"),
        ("[nodes.a]\naddresses = 10.0.0.1\n", "line 2, column 17: invalid float"),
        ("[nodes.\"\"]\naddresses = [\"10.0.0.1\"]\n", "line 1: nodes.: a node name must not be empty"),
    ];
    for (text, want) in cases {
        let err = Topology::from_toml(text).expect_err(text).to_string();
        assert!(err.starts_with(want), "{text:?}\n got: {err}\nwant: {want}");
        assert!(!err.contains('\n'), "{err}");
    }
    let syntax = Topology::from_toml("[nodes.a]\naddresses = 10.0.0.1\n").unwrap_err();
    assert!(syntax.syntax && syntax.to_string().ends_with("(TOML syntax)"), "{syntax}");
}

#[test]
fn files_that_cannot_be_read() {
    let dir = std::env::temp_dir().join(format!("smbwire-topo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = |n: &str| dir.join(n).to_string_lossy().into_owned();
    assert_eq!(load_file(&p("nope.toml")).unwrap_err(), format!("{}: no such file", p("nope.toml")));
    let d = dir.to_string_lossy().into_owned();
    assert!(load_file(&d).unwrap_err().ends_with("is a directory, not a topology file"));
    std::fs::write(p("bin.toml"), b"[nodes.a]\naddresses = [\"\xff\"]\n").unwrap();
    assert_eq!(load_file(&p("bin.toml")).unwrap_err(), format!("{}: line 2: not UTF-8 text", p("bin.toml")));
    std::fs::write(p("ok.toml"), GOOD).unwrap();
    assert_eq!(load_file(&p("ok.toml")).unwrap().nodes().len(), 3);
    // Never read whole: an endless file stops at the bound (it grew until memory ran out).
    assert_eq!(load_file("/dev/zero").unwrap_err(), "/dev/zero: larger than 64 MiB, not a topology file");
    let _ = std::fs::remove_dir_all(&dir);
}
