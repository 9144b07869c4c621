//! Nodes, membership and share/file rules (parsed from TOML on the Python side and passed
//! in as JSON; see `Topology::from_json`).

use super::attribution::Class;
use serde_json::Value;
use std::collections::HashMap;
use std::net::IpAddr;

/// Default bound on nodes created for addresses the topology does not list.
pub const DEFAULT_AUTO_NODE_CAP: usize = 65_536;

/// Name of the node that absorbs unlisted addresses past the cap.
pub const OVERFLOW_NODE: &str = "other";

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIdx(pub u32);

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    pub name: String,
    pub addresses: Vec<IpAddr>,
    /// Part of the storage cluster (false: a client).
    pub member: bool,
}

/// A share/file rule: when every pattern it gives matches, its class overrides inference.
#[derive(Clone, Debug)]
pub struct Rule {
    share: Option<Glob>,
    file: Option<Glob>,
    pub class: Class,
}

#[derive(Debug, Clone)]
pub struct Topology {
    nodes: Vec<Node>,
    by_address: HashMap<IpAddr, NodeIdx>,
    rules: Vec<Rule>,
    /// The topology file listed nodes: unlisted addresses are clients.
    listed: bool,
    auto_nodes: usize,
    auto_node_cap: usize,
    overflow: Option<NodeIdx>,
    overflow_lookups: u64,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            nodes: Vec::new(),
            by_address: HashMap::new(),
            rules: Vec::new(),
            listed: false,
            auto_nodes: 0,
            auto_node_cap: DEFAULT_AUTO_NODE_CAP,
            overflow: None,
            overflow_lookups: 0,
        }
    }
}

impl Topology {
    /// `{"nodes":[{"name":..,"addresses":[..],"member":true}], "rules":[{"share":glob?,"file":glob?,"class":..}]}`
    /// An empty object means: every IP address is its own node and a member.
    ///
    /// `member` defaults to true. Globs are case-insensitive with `*` (any run, also empty),
    /// `?` (one character) and `[...]` sets; there is no escape character, so `\` is literal.
    pub fn from_json(v: &Value) -> Result<Self, String> {
        let obj = v.as_object().ok_or("topology: expected a JSON object")?;
        for key in obj.keys() {
            if key != "nodes" && key != "rules" {
                return Err(format!(
                    "topology: unknown key {key:?} (expected \"nodes\" and \"rules\")"
                ));
            }
        }
        let mut topo = Topology::default();
        if let Some(nodes) = obj.get("nodes") {
            let nodes = nodes
                .as_array()
                .ok_or("topology: \"nodes\" must be a list")?;
            for (i, node) in nodes.iter().enumerate() {
                topo.add_listed_node(i, node)?;
            }
            topo.listed = !topo.nodes.is_empty();
        }
        if let Some(rules) = obj.get("rules") {
            let rules = rules
                .as_array()
                .ok_or("topology: \"rules\" must be a list")?;
            for (i, rule) in rules.iter().enumerate() {
                topo.rules.push(parse_rule(i, rule)?);
            }
        }
        Ok(topo)
    }

    fn add_listed_node(&mut self, i: usize, v: &Value) -> Result<(), String> {
        let obj = v
            .as_object()
            .ok_or_else(|| format!("topology: nodes[{i}] must be an object"))?;
        for key in obj.keys() {
            if !matches!(key.as_str(), "name" | "addresses" | "member") {
                return Err(format!("topology: nodes[{i}]: unknown key {key:?}"));
            }
        }
        let name = match obj.get("name") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => {
                return Err(format!(
                    "topology: nodes[{i}]: \"name\" must be a non-empty string"
                ))
            }
        };
        if self.nodes.iter().any(|n| n.name == name) {
            return Err(format!(
                "topology: nodes[{i}]: node name {name:?} is listed twice"
            ));
        }
        let member = match obj.get("member") {
            None => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(format!(
                    "topology: node {name:?}: \"member\" must be true or false"
                ))
            }
        };
        let addrs = obj
            .get("addresses")
            .and_then(Value::as_array)
            .ok_or_else(|| {
                format!("topology: node {name:?}: \"addresses\" must be a list of IP addresses")
            })?;
        let idx = NodeIdx(self.nodes.len() as u32);
        let mut addresses = Vec::with_capacity(addrs.len());
        for a in addrs {
            let text = a
                .as_str()
                .ok_or_else(|| format!("topology: node {name:?}: addresses must be strings"))?;
            let ip: IpAddr = text
                .trim()
                .parse()
                .map_err(|_| format!("topology: node {name:?}: {text:?} is not an IP address"))?;
            let ip = ip.to_canonical();
            if let Some(other) = self.by_address.insert(ip, idx) {
                let other = if other == idx {
                    name.as_str()
                } else {
                    self.nodes[other.0 as usize].name.as_str()
                };
                return Err(format!(
                    "topology: address {ip} is listed for both {other:?} and {name:?}"
                ));
            }
            addresses.push(ip);
        }
        self.nodes.push(Node {
            name,
            addresses,
            member,
        });
        Ok(())
    }

    /// Bound on automatic nodes (addresses the topology does not list); past it, addresses
    /// map to one node named `other`.
    pub fn set_auto_node_cap(&mut self, cap: usize) {
        self.auto_node_cap = cap;
    }

    /// The node an address belongs to; an unlisted address becomes a node named by its text
    /// (a member when the topology lists no nodes at all, a client otherwise).
    pub fn node_of(&mut self, ip: IpAddr) -> NodeIdx {
        let ip = ip.to_canonical();
        if let Some(&idx) = self.by_address.get(&ip) {
            return idx;
        }
        let member = !self.listed;
        if self.auto_nodes >= self.auto_node_cap {
            self.overflow_lookups += 1;
            if let Some(idx) = self.overflow {
                return idx;
            }
            let idx = self.push_node(Node {
                name: OVERFLOW_NODE.to_string(),
                addresses: Vec::new(),
                member,
            });
            self.overflow = Some(idx);
            return idx;
        }
        self.auto_nodes += 1;
        let idx = self.push_node(Node {
            name: ip.to_string(),
            addresses: vec![ip],
            member,
        });
        self.by_address.insert(ip, idx);
        idx
    }

    fn push_node(&mut self, node: Node) -> NodeIdx {
        let idx = NodeIdx(self.nodes.len() as u32);
        self.nodes.push(node);
        idx
    }

    pub fn node(&self, idx: NodeIdx) -> &Node {
        &self.nodes[idx.0 as usize]
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn has_rules(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Lookups of unlisted addresses that went to the `other` node because of the cap.
    pub fn overflow_lookups(&self) -> u64 {
        self.overflow_lookups
    }

    /// Class of the first rule whose given patterns all match. A pattern for a name that is
    /// unknown (share or file not seen in the capture) does not match.
    pub fn rule_class(&self, share: Option<&str>, file: Option<&str>) -> Option<Class> {
        if self.rules.is_empty() {
            return None;
        }
        let share: Option<Vec<char>> = share.map(fold);
        let file: Option<Vec<char>> = file.map(fold);
        let matches = |g: &Option<Glob>, text: &Option<Vec<char>>| match (g, text) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(g), Some(t)) => g.matches(t),
        };
        self.rules
            .iter()
            .find(|r| matches(&r.share, &share) && matches(&r.file, &file))
            .map(|r| r.class)
    }
}

fn parse_rule(i: usize, v: &Value) -> Result<Rule, String> {
    let obj = v
        .as_object()
        .ok_or_else(|| format!("topology: rules[{i}] must be an object"))?;
    for key in obj.keys() {
        if !matches!(key.as_str(), "share" | "file" | "class") {
            return Err(format!(
                "topology: rules[{i}]: unknown key {key:?} (expected share, file, class)"
            ));
        }
    }
    let glob = |key: &str| -> Result<Option<Glob>, String> {
        match obj.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(Glob::new(s))),
            Some(_) => Err(format!(
                "topology: rules[{i}]: \"{key}\" must be a glob string"
            )),
        }
    };
    let share = glob("share")?;
    let file = glob("file")?;
    if share.is_none() && file.is_none() {
        return Err(format!(
            "topology: rules[{i}]: give a \"share\" or a \"file\" pattern (or both)"
        ));
    }
    let class = match obj.get("class") {
        Some(Value::String(s)) => Class::from_name(s).ok_or_else(|| {
            let names: Vec<&str> = Class::ALL.iter().map(|c| c.name()).collect();
            format!(
                "topology: rules[{i}]: unknown class {s:?} (one of: {})",
                names.join(", ")
            )
        })?,
        _ => return Err(format!("topology: rules[{i}]: \"class\" must be a string")),
    };
    Ok(Rule { share, file, class })
}

/// Case folding for glob matching (Unicode lower case, char by char so lengths line up).
fn fold(s: &str) -> Vec<char> {
    s.chars().flat_map(char::to_lowercase).collect()
}

/// A case-insensitive shell-style glob: `*` any run (also empty, also `\`), `?` one character,
/// `[abc]` / `[a-z]` / `[!abc]` one character of (not of) a set. No escape character; a `[`
/// without a closing `]` is literal.
#[derive(Clone, Debug)]
struct Glob {
    tokens: Vec<Token>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Char(char),
    Any,
    Star,
    Set {
        negated: bool,
        items: Vec<(char, char)>,
    },
}

impl Token {
    fn matches_one(&self, c: char) -> bool {
        match self {
            Token::Char(p) => *p == c,
            Token::Any => true,
            Token::Star => false,
            Token::Set { negated, items } => {
                items.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated
            }
        }
    }
}

impl Glob {
    fn new(pattern: &str) -> Glob {
        let p = fold(pattern);
        let mut tokens = Vec::with_capacity(p.len());
        let mut i = 0;
        while i < p.len() {
            match p[i] {
                '*' => tokens.push(Token::Star),
                '?' => tokens.push(Token::Any),
                '[' => {
                    if let Some((set, next)) = parse_set(&p, i) {
                        tokens.push(set);
                        i = next;
                        continue;
                    }
                    tokens.push(Token::Char('['));
                }
                c => tokens.push(Token::Char(c)),
            }
            i += 1;
        }
        Glob { tokens }
    }

    /// Iterative matcher with one backtrack point (the last `*`): O(len(p) * len(t)) worst case,
    /// no recursion, so hostile names cannot blow the stack.
    fn matches(&self, text: &[char]) -> bool {
        let p = &self.tokens;
        let (mut pi, mut ti) = (0usize, 0usize);
        let mut star: Option<(usize, usize)> = None;
        while ti < text.len() {
            if pi < p.len() && p[pi].matches_one(text[ti]) {
                pi += 1;
                ti += 1;
            } else if pi < p.len() && p[pi] == Token::Star {
                star = Some((pi, ti));
                pi += 1;
            } else if let Some((sp, st)) = star {
                pi = sp + 1;
                ti = st + 1;
                star = Some((sp, st + 1));
            } else {
                return false;
            }
        }
        p[pi..].iter().all(|t| *t == Token::Star)
    }
}

/// `[...]` starting at `p[start]`: the set and the index after its `]`. A `]` right after
/// `[` or `[!` is a member, as in shells.
fn parse_set(p: &[char], start: usize) -> Option<(Token, usize)> {
    let mut i = start + 1;
    let negated = p.get(i) == Some(&'!');
    if negated {
        i += 1;
    }
    let first = i;
    let mut items = Vec::new();
    while i < p.len() {
        if p[i] == ']' && i > first {
            return Some((Token::Set { negated, items }, i + 1));
        }
        if p.get(i + 1) == Some(&'-') && p.get(i + 2).is_some_and(|&c| c != ']') {
            items.push((p[i], p[i + 2]));
            i += 3;
        } else {
            items.push((p[i], p[i]));
            i += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
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
    fn empty_topology_makes_every_address_a_member() {
        let mut t = Topology::from_json(&json!({})).unwrap();
        let a = t.node_of(ip("198.18.0.1"));
        let b = t.node_of(ip("198.18.0.2"));
        assert_ne!(a, b);
        assert!(t.node(a).member && t.node(b).member);
        // A rules-only topology still lists no nodes.
        let mut t = Topology::from_json(&json!({"rules": [{"file": "*.vhdx", "class": "client"}]}))
            .unwrap();
        let a = t.node_of(ip("198.18.0.1"));
        assert!(t.node(a).member);
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
        let m = |p: &str, t: &str| Glob::new(p).matches(&fold(t));
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(m("*", ""));
        assert!(m("a*b*c", "aXbYbZc"));
        assert!(!m("a*b*c", "aXbYbZ"));
        assert!(m("?*?", "ab"));
        assert!(!m("?*?", "a"));
        assert!(m("**a", "a"));
        assert!(m("disk[0-9].vhdx", "DISK7.vhdx"));
        assert!(!m("disk[0-9].vhdx", "diskx.vhdx"));
        assert!(m("disk[!0-9].vhdx", "diskx.vhdx"));
        assert!(m("[]x]", "]"));
        assert!(m("[ab", "[ab"), "unclosed [ is literal");
        assert!(m("[A-C]", "b"), "sets fold case too");
        // Pathological pattern stays fast (no exponential backtracking).
        let text = "a".repeat(2000);
        assert!(!m(&format!("{}b", "*a".repeat(50)), &text));
    }

    #[test]
    fn invalid_topologies_are_refused_with_a_message() {
        let bad = [
            (json!([]), "JSON object"),
            (json!({"node": []}), "unknown key"),
            (json!({"nodes": {}}), "must be a list"),
            (json!({"nodes": [{"addresses": []}]}), "name"),
            (
                json!({"nodes": [{"name": "a", "addresses": ["x"]}]}),
                "not an IP address",
            ),
            (
                json!({"nodes": [{"name": "a", "addresses": ["198.18.0.1"], "member": "yes"}]}),
                "member",
            ),
            (
                json!({"nodes": [{"name": "a", "addresses": "198.18.0.1"}]}),
                "addresses",
            ),
            (
                json!({"nodes": [{"name": "a", "addresses": ["198.18.0.1"]}, {"name": "b", "addresses": ["198.18.0.1"]}]}),
                "listed for both",
            ),
            (
                json!({"nodes": [{"name": "a", "addresses": []}, {"name": "a", "addresses": []}]}),
                "twice",
            ),
            (
                json!({"rules": [{"class": "client"}]}),
                "\"share\" or a \"file\"",
            ),
            (
                json!({"rules": [{"file": "*", "class": "mirror"}]}),
                "unknown class",
            ),
            (json!({"rules": [{"file": 3, "class": "client"}]}), "glob"),
            (json!({"rules": [{"file": "*"}]}), "class"),
        ];
        for (v, want) in bad {
            let err = Topology::from_json(&v).expect_err(&v.to_string());
            assert!(err.contains(want), "{v}: {err}");
        }
    }
}
