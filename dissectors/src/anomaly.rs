//! Named, counted anomalies. Hostile or damaged input raises one of these; it never panics
//! and never goes unreported. Names are stable strings (they appear in the JSON output).

use std::collections::BTreeMap;

#[derive(Debug, Default, Clone)]
pub struct Anomalies {
    counts: BTreeMap<&'static str, u64>,
}

impl Anomalies {
    pub fn raise(&mut self, name: &'static str) {
        *self.counts.entry(name).or_insert(0) += 1;
    }
    pub fn raise_n(&mut self, name: &'static str, n: u64) {
        if n > 0 {
            *self.counts.entry(name).or_insert(0) += n;
        }
    }
    pub fn get(&self, name: &str) -> u64 {
        self.counts.get(name).copied().unwrap_or(0)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        self.counts.iter().map(|(k, v)| (*k, *v))
    }
}
