//! Nodes, membership and share/file rules (parsed from TOML on the Python side and passed
//! in as JSON; see `Topology::from_json`).

#[derive(Debug, Default, Clone)]
pub struct Topology {}

impl Topology {
    /// `{"nodes":[{"name":..,"addresses":[..],"member":true}], "rules":[{"share":glob?,"file":glob?,"class":..}]}`
    /// An empty object means: every IP address is its own node and a member.
    pub fn from_json(_v: &serde_json::Value) -> Result<Self, String> {
        Ok(Topology {})
    }
}
