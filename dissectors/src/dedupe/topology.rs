//! The topology (docs/topology.md): nodes and their addresses, membership, share/file rules.
//!
//! One parser and one validation for both forms it comes in: the TOML file a user writes
//! (`Topology::from_toml`, `load_file`) and the engine config's JSON object the Python face,
//! the synthesizer and the tests pass (`Topology::from_json`, the shape `config_json` returns).
//! Both are read by serde into the same specs (unknown keys refused) and checked by one
//! function, `Topology::build`. Errors from the TOML form name the line (toml's spans).
//!
//! Globs are `globset` globs, case-insensitive, with `\` a literal character (SMB paths use
//! backslashes) and `*` / `?` matching any character, `\` included.

use super::attribution::Class;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use crate::fasthash::FastMap as HashMap;
use std::net::IpAddr;
use std::ops::Range;
use toml::Spanned;

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
    /// Address ranges (CIDR) of the node, from the topology file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranges: Vec<Cidr>,
    /// Part of the storage cluster (false: a client, or not known: see `Topology::membership`).
    pub member: bool,
}

/// An address range `ADDRESS/PREFIX` (IPv4 or IPv6), in canonical form (host bits zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// `198.18.0.0/24`, `fd00::/64`; host bits must be zero (a typo otherwise).
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let (addr, len) = text.split_once('/').ok_or_else(|| format!("'{text}' is not an address range"))?;
        let net: IpAddr = addr.trim().parse().map_err(|_| format!("'{text}': '{addr}' is not an IP address"))?;
        let net = net.to_canonical();
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = len.trim().parse().ok().filter(|p| *p <= max).ok_or_else(|| format!("'{text}': prefix length must be 0 to {max}"))?;
        let c = Cidr { net, prefix };
        if c.masked(net) != net {
            return Err(format!("'{text}' has host bits set (did you mean {}/{prefix}?)", c.masked(net)));
        }
        Ok(c)
    }

    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(a) => {
                let m = if self.prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(self.prefix)) };
                IpAddr::V4((u32::from(a) & m).into())
            }
            IpAddr::V6(a) => {
                let m = if self.prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(self.prefix)) };
                IpAddr::V6((u128::from(a) & m).into())
            }
        }
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.net
    }

    pub fn prefix(&self) -> u8 {
        self.prefix
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

impl Serialize for Cidr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
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
    /// Node ranges (CIDR), longest prefix first; an exact address wins over a range.
    ranges: Vec<(Cidr, NodeIdx)>,
    /// The topology file listed nodes: unlisted addresses are clients.
    listed: bool,
    /// No nodes listed, and the user said every address is a cluster member
    /// (`--assume-members`); without it membership is unknown.
    assume_members: bool,
    auto_nodes: usize,
    auto_node_cap: usize,
    overflow: Option<NodeIdx>,
    overflow_lookups: u64,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            nodes: Vec::new(),
            by_address: HashMap::default(),
            ranges: Vec::new(),
            rules: Vec::new(),
            listed: false,
            assume_members: false,
            auto_nodes: 0,
            auto_node_cap: DEFAULT_AUTO_NODE_CAP,
            overflow: None,
            overflow_lookups: 0,
        }
    }
}

impl Topology {
    /// Bound on automatic nodes (addresses the topology does not list); past it, addresses
    /// map to one node named `other`.
    pub fn set_auto_node_cap(&mut self, cap: usize) {
        self.auto_node_cap = cap;
    }

    /// Treat every address as its own node and a cluster member when no nodes are listed
    /// (`--assume-members`: the behaviour before membership could be unknown).
    pub fn set_assume_members(&mut self, yes: bool) {
        self.assume_members = yes;
    }

    /// Whether membership is known: from the listed nodes, or assumed by the user. When it
    /// is not, only forwarding seen on the wire decides a class (docs/attribution.md).
    pub fn membership_known(&self) -> bool {
        self.listed || self.assume_members
    }

    /// Where membership comes from, as the result's `membership` says: `topology`,
    /// `assumed` or `unknown`.
    pub fn membership(&self) -> &'static str {
        if self.listed {
            "topology"
        } else if self.assume_members {
            "assumed"
        } else {
            "unknown"
        }
    }

    /// The node `other` that absorbs what is past a bound (automatic nodes, edges), made at
    /// its first use.
    pub fn overflow_node(&mut self) -> NodeIdx {
        if let Some(idx) = self.overflow {
            return idx;
        }
        let member = !self.listed && self.assume_members;
        let idx = self.push_node(Node { name: OVERFLOW_NODE.to_string(), addresses: Vec::new(), ranges: Vec::new(), member });
        self.overflow = Some(idx);
        idx
    }

    /// The node an address belongs to: a listed address, else the longest listed range that
    /// holds it; an unlisted address becomes a node named by its text (a client when the
    /// topology lists nodes; else a member with `--assume-members`, of unknown membership
    /// otherwise).
    pub fn node_of(&mut self, ip: IpAddr) -> NodeIdx {
        let ip = ip.to_canonical();
        if let Some(&idx) = self.by_address.get(&ip) {
            return idx;
        }
        if let Some(&(_, idx)) = self.ranges.iter().find(|(c, _)| c.contains(ip)) {
            return idx;
        }
        let member = !self.listed && self.assume_members;
        if self.auto_nodes >= self.auto_node_cap {
            self.overflow_lookups += 1;
            return self.overflow_node();
        }
        self.auto_nodes += 1;
        let idx = self.push_node(Node {
            name: ip.to_string(),
            addresses: vec![ip],
            ranges: Vec::new(),
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
        let matches = |g: &Option<Glob>, text: Option<&str>| match (g, text) {
            (None, _) => true,
            (Some(_), None) => false,
            (Some(g), Some(t)) => g.matches(t),
        };
        self.rules.iter().find(|r| matches(&r.share, share) && matches(&r.file, file)).map(|r| r.class)
    }
}

// --- the file and its validation ---

/// A topology that cannot be used: what is wrong and, for the TOML form, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyError {
    /// 1-based line (and column, for TOML syntax errors) in the file.
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// The key the error is about (`nodes.a.addresses`, `rules.0.class`); empty when the
    /// parser does not say.
    pub key: String,
    pub message: String,
    /// A TOML syntax error (not a validation error).
    pub syntax: bool,
}

impl std::fmt::Display for TopologyError {
    /// `line 5: nodes.b.addresses: address 10.0.0.1 is also in node 'a'`, or
    /// `line 2, column 13: invalid string (TOML syntax)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "line {l}, column {c}: ")?,
            (Some(l), None) => write!(f, "line {l}: ")?,
            _ => {}
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        f.write_str(&self.message)?;
        if self.syntax {
            f.write_str(" (TOML syntax)")?;
        }
        Ok(())
    }
}

impl std::error::Error for TopologyError {}

/// The TOML file: `[nodes.NAME]` tables and `[[rules]]`.
#[derive(Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    nodes: IndexMap<Spanned<String>, Spanned<NodeToml>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    rules: Vec<Spanned<RuleToml>>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct NodeToml {
    addresses: Spanned<Vec<Spanned<String>>>,
    #[serde(default = "yes")]
    member: Spanned<bool>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct RuleToml {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    share: Option<Spanned<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    file: Option<Spanned<String>>,
    class: Spanned<String>,
}

fn yes() -> Spanned<bool> {
    Spanned::new(0..0, true)
}

/// The config form: `{"nodes": [{"name", "addresses", "member"}], "rules": [{"share", "file", "class"}],
/// "assume_members": false}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigJson {
    #[serde(default)]
    nodes: Vec<NodeJson>,
    #[serde(default)]
    rules: Vec<RuleJson>,
    #[serde(default)]
    assume_members: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeJson {
    name: String,
    addresses: Vec<String>,
    #[serde(default = "yes_bool")]
    member: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleJson {
    #[serde(default)]
    share: Option<String>,
    #[serde(default)]
    file: Option<String>,
    class: String,
}

fn yes_bool() -> bool {
    true
}

/// A value and where it was written (byte range in the TOML text; none for JSON).
type At<T> = (T, Option<Range<usize>>);

/// What both forms are read into before `Topology::build` checks it.
struct NodeSpec {
    name: At<String>,
    addresses: At<Vec<At<String>>>,
    member: bool,
}

struct RuleSpec {
    at: Option<Range<usize>>,
    share: Option<At<String>>,
    file: Option<At<String>>,
    class: At<String>,
}

fn at<T: Clone>(s: &Spanned<T>) -> At<T> {
    (s.get_ref().clone(), Some(s.span()))
}

/// Byte offset -> (1-based line, 1-based column in characters).
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

impl Topology {
    /// Parse and check topology TOML text (docs/topology.md).
    pub fn from_toml(text: &str) -> Result<Topology, TopologyError> {
        let file: FileToml = toml::from_str(text).map_err(|e| {
            // Serde errors (unknown key, missing key, wrong type) come with the span of the
            // table or value; a syntax error with the position of the bad character.
            let syntax = !is_serde_error(e.message());
            let (line, column) = match e.span() {
                Some(r) => {
                    let (l, c) = line_col(text, r.start);
                    (Some(l), syntax.then_some(c))
                }
                None => (None, None),
            };
            TopologyError { line, column, key: String::new(), message: first_line(e.message()), syntax }
        })?;
        let nodes = file
            .nodes
            .iter()
            .map(|(name, node)| {
                let node = node.get_ref();
                NodeSpec {
                    name: at(name),
                    addresses: (node.addresses.get_ref().iter().map(at).collect(), Some(node.addresses.span())),
                    member: *node.member.get_ref(),
                }
            })
            .collect();
        let rules = file
            .rules
            .iter()
            .map(|r| {
                let span = r.span();
                let r = r.get_ref();
                RuleSpec { at: Some(span), share: r.share.as_ref().map(at), file: r.file.as_ref().map(at), class: at(&r.class) }
            })
            .collect();
        Topology::build(nodes, rules, Some(text))
    }

    /// The engine config's `"topology"` object (the shape `config_json` returns). An empty
    /// object means: every IP address is its own node, membership unknown (with
    /// `"assume_members": true`: every node a member).
    pub fn from_json(v: &Value) -> Result<Topology, TopologyError> {
        if !v.is_object() {
            return Err(TopologyError { line: None, column: None, key: String::new(), message: "expected an object with \"nodes\" and \"rules\"".into(), syntax: false });
        }
        let c: ConfigJson = ConfigJson::deserialize(v).map_err(|e| TopologyError {
            line: None,
            column: None,
            key: String::new(),
            message: e.to_string(),
            syntax: false,
        })?;
        let nodes = c
            .nodes
            .into_iter()
            .map(|n| NodeSpec {
                name: (n.name, None),
                addresses: (n.addresses.into_iter().map(|a| (a, None)).collect(), None),
                member: n.member,
            })
            .collect();
        let rules = c
            .rules
            .into_iter()
            .map(|r| RuleSpec { at: None, share: r.share.map(|s| (s, None)), file: r.file.map(|s| (s, None)), class: (r.class, None) })
            .collect();
        let mut topo = Topology::build(nodes, rules, None)?;
        topo.assume_members = c.assume_members;
        Ok(topo)
    }

    /// The one validation of both forms.
    fn build(nodes: Vec<NodeSpec>, rules: Vec<RuleSpec>, text: Option<&str>) -> Result<Topology, TopologyError> {
        let fail = |span: &Option<Range<usize>>, key: String, message: String| -> TopologyError {
            let line = match (span, text) {
                (Some(r), Some(t)) => Some(line_col(t, r.start).0),
                _ => None,
            };
            TopologyError { line, column: None, key, message, syntax: false }
        };
        let mut topo = Topology::default();
        for spec in nodes {
            let (name, name_at) = spec.name;
            let key = format!("nodes.{name}");
            if name.trim().is_empty() {
                return Err(fail(&name_at, key, "a node name must not be empty".into()));
            }
            if topo.nodes.iter().any(|n| n.name == name) {
                return Err(fail(&name_at, key, format!("node name '{name}' is listed twice")));
            }
            let (addrs, addrs_at) = spec.addresses;
            let key = format!("nodes.{name}.addresses");
            if addrs.is_empty() {
                return Err(fail(&addrs_at, key, "expected a non-empty list of IP addresses".into()));
            }
            let idx = NodeIdx(topo.nodes.len() as u32);
            let mut addresses = Vec::with_capacity(addrs.len());
            let mut ranges = Vec::new();
            for (text, a_at) in addrs {
                let span = a_at.or_else(|| addrs_at.clone());
                if text.contains('/') {
                    let c = Cidr::parse(text.trim()).map_err(|m| fail(&span, key.clone(), m))?;
                    if let Some((_, other)) = topo.ranges.iter().find(|(r, _)| *r == c) {
                        let what = if *other == idx {
                            "twice in this node".to_string()
                        } else {
                            format!("also in node '{}'", topo.nodes[other.0 as usize].name)
                        };
                        return Err(fail(&span, key, format!("range {c} is {what}")));
                    }
                    topo.ranges.push((c, idx));
                    ranges.push(c);
                    continue;
                }
                let ip: IpAddr = text
                    .trim()
                    .parse()
                    .map_err(|_| fail(&span, key.clone(), format!("'{text}' is not an IP address or a range (ADDRESS/PREFIX)")))?;
                let ip = ip.to_canonical();
                if let Some(other) = topo.by_address.insert(ip, idx) {
                    let what = if other == idx {
                        "twice in this node".to_string()
                    } else {
                        format!("also in node '{}'", topo.nodes[other.0 as usize].name)
                    };
                    return Err(fail(&span, key, format!("address {ip} is {what}")));
                }
                addresses.push(ip);
            }
            topo.nodes.push(Node { name, addresses, ranges, member: spec.member });
        }
        // Longest prefix first: a narrower range of another node wins over a wider one.
        topo.ranges.sort_by_key(|(c, _)| std::cmp::Reverse(c.prefix()));
        topo.listed = !topo.nodes.is_empty();
        for (i, spec) in rules.into_iter().enumerate() {
            let key = format!("rules.{i}");
            let glob = |g: Option<At<String>>, which: &str| -> Result<Option<Glob>, TopologyError> {
                let Some((pattern, g_at)) = g else { return Ok(None) };
                let span = g_at.or_else(|| spec.at.clone());
                Glob::new(&pattern).map(Some).map_err(|m| fail(&span, format!("{key}.{which}"), m))
            };
            let share = glob(spec.share, "share")?;
            let file = glob(spec.file, "file")?;
            if share.is_none() && file.is_none() {
                return Err(fail(&spec.at, key, "a rule needs 'share' or 'file' (or both)".into()));
            }
            let (name, class_at) = spec.class;
            let class = Class::from_name(&name).filter(|c| Class::DECIDED.contains(c)).ok_or_else(|| {
                let names: Vec<&str> = Class::DECIDED.iter().map(|c| c.name()).collect();
                fail(&class_at, format!("{key}.class"), format!("unknown class '{name}' (expected one of: {})", names.join(", ")))
            })?;
            topo.rules.push(Rule { share, file, class });
        }
        Ok(topo)
    }

    /// The listed nodes and the rules in the config form (`from_json` reads it back):
    /// addresses normalised, `member` and both patterns always present (`null`: any);
    /// `assume_members` only when set.
    pub fn config_json(&self) -> Value {
        let nodes: Vec<Value> = self.nodes[..self.listed_count()]
            .iter()
            .map(|n| {
                let addresses: Vec<String> = n.addresses.iter().map(|a| a.to_string()).chain(n.ranges.iter().map(|c| c.to_string())).collect();
                json!({"name": n.name, "addresses": addresses, "member": n.member})
            })
            .collect();
        let rules: Vec<Value> = self
            .rules
            .iter()
            .map(|r| json!({"share": r.share.as_ref().map(|g| g.pattern.as_str()), "file": r.file.as_ref().map(|g| g.pattern.as_str()), "class": r.class.name()}))
            .collect();
        let mut v = json!({"nodes": nodes, "rules": rules});
        if self.assume_members {
            v["assume_members"] = Value::Bool(true);
        }
        v
    }

    /// The same topology as a TOML file that `from_toml` reads back unchanged.
    pub fn to_toml(&self) -> String {
        let listed = self.listed_count();
        let file = FileToml {
            nodes: self.nodes[..listed]
                .iter()
                .map(|n| {
                    let addresses = n.addresses.iter().map(|a| a.to_string()).chain(n.ranges.iter().map(|c| c.to_string())).map(|a| Spanned::new(0..0, a)).collect();
                    let node = NodeToml { addresses: Spanned::new(0..0, addresses), member: Spanned::new(0..0, n.member) };
                    (Spanned::new(0..0, n.name.clone()), Spanned::new(0..0, node))
                })
                .collect(),
            rules: self
                .rules
                .iter()
                .map(|r| {
                    let g = |g: &Option<Glob>| g.as_ref().map(|g| Spanned::new(0..0, g.pattern.clone()));
                    Spanned::new(0..0, RuleToml { share: g(&r.share), file: g(&r.file), class: Spanned::new(0..0, r.class.name().to_string()) })
                })
                .collect(),
        };
        let body = toml::to_string(&file).unwrap_or_default();
        format!("# smbwire topology (docs/topology.md)\n\n{body}")
    }

    /// Nodes that came from the file (before any automatic node).
    fn listed_count(&self) -> usize {
        let auto = self.auto_nodes + usize::from(self.overflow.is_some());
        self.nodes.len() - auto
    }
}

/// Read and check a topology file. The error is one line: `PATH: line N: key: what`.
pub fn load_file(path: &str) -> Result<Topology, String> {
    use std::io::Read;
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => format!("{path}: no such file"),
        std::io::ErrorKind::IsADirectory => format!("{path}: is a directory, not a topology file"),
        _ if std::path::Path::new(path).is_dir() => format!("{path}: is a directory, not a topology file"),
        _ => format!("{path}: cannot read: {e}"),
    };
    // Read up to the bound, never whole: `-t /dev/zero` or a capture given by mistake.
    let mut bytes = Vec::new();
    std::fs::File::open(path).map_err(io)?.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("{path}: larger than {} MiB, not a topology file", MAX_FILE_BYTES >> 20));
    }
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let line = bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count() + 1;
        format!("{path}: line {line}: not UTF-8 text")
    })?;
    Topology::from_toml(text).map_err(|e| format!("{path}: {e}"))
}

/// Largest topology file read: a node per line of a few dozen bytes, a million nodes and more.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Messages toml's serde layer writes (as opposed to its parser's syntax errors).
fn is_serde_error(m: &str) -> bool {
    ["unknown field", "missing field", "invalid type", "invalid value", "invalid length", "duplicate field", "unknown variant"]
        .iter()
        .any(|p| m.starts_with(p))
}

fn first_line(m: &str) -> String {
    m.lines().next().unwrap_or("").trim().to_string()
}

/// A case-insensitive glob over a share path or a file name (globset syntax, docs/topology.md;
/// pattern and name are compared in Unicode lower case):
/// `*` any run (also empty, also `\`), `?` one character, `[abc]` / `[a-z]` / `[!abc]` sets,
/// `{a,b}` alternatives; `\` is a literal character, not an escape.
#[derive(Clone, Debug)]
struct Glob {
    pattern: String,
    matcher: globset::GlobMatcher,
}

impl Glob {
    fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("empty glob pattern (leave the key out to match any name)".into());
        }
        // globset folds ASCII only; names are folded to Unicode lower case on both sides.
        let glob = globset::GlobBuilder::new(&pattern.to_lowercase())
            .case_insensitive(true)
            .backslash_escape(false)
            .literal_separator(false)
            .build()
            .map_err(|e| format!("invalid glob '{pattern}': {}", e.kind()))?;
        Ok(Glob { pattern: pattern.to_string(), matcher: glob.compile_matcher() })
    }

    fn matches(&self, text: &str) -> bool {
        self.matcher.is_match(text.to_lowercase())
    }
}

#[cfg(test)]
mod tests;
