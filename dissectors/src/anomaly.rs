//! Named, counted anomalies. Hostile or damaged input raises one of these; it never panics
//! and never goes unreported. Each stage lists its anomalies as an enum (`smb2::Anomaly`,
//! `tcp::Anomaly`, ...) declared with `anomalies!`; a record parser's error type is an anomaly
//! too (`AnomalyKind`). Names are stable strings: they are the keys of the JSON `"anomalies"`
//! object, and `crate::all_anomaly_names` lists every one (docs/json-schema.md documents them).

use std::collections::BTreeMap;

/// Something that can be raised: its stable name is the JSON key it is counted under.
pub trait AnomalyKind: Copy {
    fn name(self) -> &'static str;
}

/// Declares a stage's anomaly enum: each variant with its stable name, `name()`, `ALL`.
macro_rules! anomalies {
    ($(#[$m:meta])* $vis:vis enum $ty:ident { $($(#[$vm:meta])* $var:ident = $name:literal,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $ty { $($(#[$vm])* $var,)* }

        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$var,)*];

            /// The stable name (the JSON key).
            pub const fn name(self) -> &'static str {
                match self { $($ty::$var => $name,)* }
            }
        }

        impl crate::anomaly::AnomalyKind for $ty {
            fn name(self) -> &'static str {
                $ty::name(self)
            }
        }
    };
}

pub(crate) use anomalies;

/// Takes `n` back from the count `name` of a table of named counts (anomalies, SMB2
/// commands); a count that reaches zero is no longer listed, as one never raised.
pub fn take_back_count(counts: &mut BTreeMap<&'static str, u64>, name: &'static str, n: u64) {
    if let Some(c) = counts.get_mut(name) {
        *c = c.saturating_sub(n);
        if *c == 0 {
            counts.remove(name);
        }
    }
}

#[derive(Debug, Default, Clone)]
pub struct Anomalies {
    counts: BTreeMap<&'static str, u64>,
}

impl Anomalies {
    pub fn raise(&mut self, kind: impl AnomalyKind) {
        *self.counts.entry(kind.name()).or_insert(0) += 1;
    }
    pub fn raise_n(&mut self, kind: impl AnomalyKind, n: u64) {
        if n > 0 {
            *self.counts.entry(kind.name()).or_insert(0) += n;
        }
    }
    /// Adds another set of counts (another stage's table) to these.
    pub fn absorb(&mut self, other: &Anomalies) {
        for (k, v) in other.iter() {
            *self.counts.entry(k).or_insert(0) += v;
        }
    }
    /// Adds `n` under a name the engine raises (`crate::all_anomaly_names`): counts read back.
    pub fn add_named(&mut self, name: &'static str, n: u64) {
        if n > 0 {
            *self.counts.entry(name).or_insert(0) += n;
        }
    }
    /// The counts now (what `stream::confirm` compares against to take a message's back).
    pub fn counts(&self) -> &BTreeMap<&'static str, u64> {
        &self.counts
    }
    /// Takes `n` back from `name` (a message that was not one raised it).
    pub fn take_back(&mut self, name: &'static str, n: u64) {
        take_back_count(&mut self.counts, name, n);
    }
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }
}
