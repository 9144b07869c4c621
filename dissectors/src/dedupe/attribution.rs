//! The attribution rules: duplicate kind and class of every block of a send.
//!
//! Pure decisions only; the index (`index.rs`) gathers the facts they need. The rules, their
//! reasons and their limits are written up in docs/attribution.md.

use super::SendKind;
use serde::Serialize;

/// What a byte of payload was moved for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Class {
    /// A member wrote to another member, which wrote the same block on (CSV/S2D redirected
    /// I/O: a non-owner sends the write to the owner, which replicates it).
    #[serde(rename = "redirection")]
    Redirection,
    /// A member wrote to another member, which did not send it on (mirror copies).
    #[serde(rename = "replication")]
    Replication,
    /// A member's READ response to another member.
    #[serde(rename = "redirected-read")]
    RedirectedRead,
    /// Either end is not a member.
    #[serde(rename = "client")]
    Client,
    /// A WRITE whose purpose the wire does not show: no topology says which nodes are
    /// cluster members, and no forwarding of its blocks was seen (unclassified).
    #[serde(rename = "write")]
    Write,
    /// A READ response whose purpose the wire does not show (no topology; unclassified).
    #[serde(rename = "read")]
    Read,
}

impl Class {
    pub const ALL: [Class; Class::COUNT] = [
        Class::Redirection,
        Class::Replication,
        Class::RedirectedRead,
        Class::Client,
        Class::Write,
        Class::Read,
    ];
    pub const COUNT: usize = 6;
    /// The classes a topology rule may assign (what the traffic is for); `write` and `read`
    /// only say that it is not known.
    pub const DECIDED: [Class; 4] = [Class::Redirection, Class::Replication, Class::RedirectedRead, Class::Client];

    pub fn name(self) -> &'static str {
        match self {
            Class::Redirection => "redirection",
            Class::Replication => "replication",
            Class::RedirectedRead => "redirected-read",
            Class::Client => "client",
            Class::Write => "write",
            Class::Read => "read",
        }
    }

    /// The order reports and the live view list classes in: the work the cluster was asked
    /// to do first, then what it costs.
    pub const REPORT_ORDER: [Class; Class::COUNT] =
        [Class::Client, Class::Redirection, Class::Replication, Class::RedirectedRead, Class::Write, Class::Read];

    /// A short label for tables and the live view.
    pub fn label(self) -> &'static str {
        match self {
            Class::Redirection => "redirection",
            Class::Replication => "replication",
            Class::RedirectedRead => "redirected read",
            Class::Client => "client I/O",
            Class::Write => "write (unclassified)",
            Class::Read => "read (unclassified)",
        }
    }

    /// One line on what the class means (docs/topology.md, docs/attribution.md).
    pub fn description(self) -> &'static str {
        match self {
            Class::Redirection => "a member's WRITE to another member that writes the same block on (CSV/S2D redirected I/O)",
            Class::Replication => "a member's WRITE to another member that does not send it on (mirror copies)",
            Class::RedirectedRead => "a member's READ response to another member",
            Class::Client => "payload where either end is not a member (the work the cluster was asked to do)",
            Class::Write => "WRITE payload whose purpose the wire does not show (no topology names the cluster members; no forwarding seen)",
            Class::Read => "READ payload whose purpose the wire does not show (no topology names the cluster members)",
        }
    }

    pub fn from_name(name: &str) -> Option<Class> {
        Class::ALL.into_iter().find(|c| c.name() == name)
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Which rule decided a block's class (reported per edge and class as `decided_by`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecidedBy {
    /// Membership of the ends and the operation.
    Inference,
    /// A topology rule matched the share / file name.
    Rule,
    /// The receiver of the WRITE sent the same block on in a WRITE.
    Forwarded,
}

/// How a non-trivial block relates to what already crossed its edge within the window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DupKind {
    /// First time on this edge within the window.
    Unique,
    /// Another copy of a whole payload that already crossed the edge.
    PerCopy,
    /// The same bytes sent again as (part of) other data.
    RepeatedContent,
}

/// What is known of the two ends of a send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ends {
    pub src_member: bool,
    pub dst_member: bool,
    /// Membership comes from a topology file (or `--assume-members`); without it, only what
    /// the wire shows (forwarding) decides a class.
    pub known: bool,
}

/// Class from membership and operation alone.
pub fn inferred_class(kind: SendKind, ends: Ends) -> Class {
    if !ends.known {
        return match kind {
            SendKind::Write => Class::Write,
            SendKind::Read => Class::Read,
        };
    }
    if !(ends.src_member && ends.dst_member) {
        return Class::Client;
    }
    match kind {
        SendKind::Write => Class::Replication,
        SendKind::Read => Class::RedirectedRead,
    }
}

/// Class of one block of a send.
///
/// `rule`: class of a matching topology rule. `forwarded`: the receiver of this WRITE later
/// wrote the same block to another node within the window. `forward_of`: the sender of this
/// WRITE received the same block in a WRITE earlier within the window (it writes it on).
///
/// With known membership, forwarding only turns member→member WRITEs into redirection: a
/// client's write that a member then replicates is client traffic. With unknown membership
/// (no topology) the wire alone decides: a WRITE that its receiver forwards is redirection,
/// the forward itself is replication, everything else is `write` / `read` (unclassified).
pub fn block_class(kind: SendKind, ends: Ends, rule: Option<Class>, forwarded: bool, forward_of: bool) -> (Class, DecidedBy) {
    if let Some(class) = rule {
        return (class, DecidedBy::Rule);
    }
    if kind == SendKind::Write {
        if ends.known {
            if forwarded && ends.src_member && ends.dst_member {
                return (Class::Redirection, DecidedBy::Forwarded);
            }
        } else if forwarded {
            return (Class::Redirection, DecidedBy::Forwarded);
        } else if forward_of {
            return (Class::Replication, DecidedBy::Forwarded);
        }
    }
    (inferred_class(kind, ends), DecidedBy::Inference)
}

/// What the index knows about the send a duplicate block repeats (the most recent earlier
/// send of that block on the same edge).
pub struct Repeated {
    /// It is the current send itself (the block occurs twice in one payload).
    pub same_send: bool,
    /// Same payload digest and length as the current send.
    pub same_payload: bool,
    /// No completion of it was seen before the current send started.
    pub outstanding: bool,
    /// No send of a different payload crossed the edge between it and the current send.
    pub consecutive: bool,
}

/// Per-copy send vs repeated content for a duplicate block.
pub fn dup_kind(r: &Repeated) -> DupKind {
    if !r.same_send && r.same_payload && (r.outstanding || r.consecutive) {
        DupKind::PerCopy
    } else {
        DupKind::RepeatedContent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_round_trip() {
        for c in Class::ALL {
            assert_eq!(Class::from_name(c.name()), Some(c));
            assert_eq!(
                serde_json::to_value(c).unwrap(),
                serde_json::json!(c.name())
            );
        }
        assert_eq!(Class::from_name("Replication"), None);
    }

    #[test]
    fn rule_beats_forwarding_beats_inference() {
        use SendKind::*;
        let m = |s, d| Ends { src_member: s, dst_member: d, known: true };
        assert_eq!(block_class(Write, m(true, true), None, false, false), (Class::Replication, DecidedBy::Inference));
        assert_eq!(block_class(Read, m(true, true), None, false, false), (Class::RedirectedRead, DecidedBy::Inference));
        assert_eq!(block_class(Write, m(false, true), None, false, false), (Class::Client, DecidedBy::Inference));
        assert_eq!(block_class(Read, m(true, false), None, false, false), (Class::Client, DecidedBy::Inference));
        assert_eq!(block_class(Write, m(true, true), None, true, false), (Class::Redirection, DecidedBy::Forwarded));
        assert_eq!(block_class(Write, m(false, true), None, true, false), (Class::Client, DecidedBy::Inference));
        assert_eq!(block_class(Read, m(true, true), None, true, false), (Class::RedirectedRead, DecidedBy::Inference));
        assert_eq!(block_class(Write, m(true, true), Some(Class::Client), true, false), (Class::Client, DecidedBy::Rule));
        // Known membership: a forward is what membership says it is.
        assert_eq!(block_class(Write, m(true, true), None, false, true), (Class::Replication, DecidedBy::Inference));
        assert_eq!(block_class(Write, m(false, true), None, false, true), (Class::Client, DecidedBy::Inference));
    }

    #[test]
    fn without_membership_only_the_wire_decides() {
        use SendKind::*;
        let u = Ends { src_member: false, dst_member: false, known: false };
        assert_eq!(block_class(Write, u, None, false, false), (Class::Write, DecidedBy::Inference));
        assert_eq!(block_class(Read, u, None, false, false), (Class::Read, DecidedBy::Inference));
        assert_eq!(block_class(Write, u, None, true, false), (Class::Redirection, DecidedBy::Forwarded));
        assert_eq!(block_class(Write, u, None, false, true), (Class::Replication, DecidedBy::Forwarded));
        // A hop in a chain that both received and forwards: the forwarding decides.
        assert_eq!(block_class(Write, u, None, true, true), (Class::Redirection, DecidedBy::Forwarded));
        // READs are never forwarded as WRITEs.
        assert_eq!(block_class(Read, u, None, true, true), (Class::Read, DecidedBy::Inference));
    }

    #[test]
    fn per_copy_needs_same_payload_and_outstanding_or_consecutive() {
        let r = |same_send, same_payload, outstanding, consecutive| {
            dup_kind(&Repeated {
                same_send,
                same_payload,
                outstanding,
                consecutive,
            })
        };
        assert_eq!(r(false, true, true, false), DupKind::PerCopy);
        assert_eq!(r(false, true, false, true), DupKind::PerCopy);
        assert_eq!(r(false, true, false, false), DupKind::RepeatedContent);
        assert_eq!(r(false, false, true, true), DupKind::RepeatedContent);
        assert_eq!(r(true, true, true, true), DupKind::RepeatedContent);
    }
}
