//! Payload bytes per time interval, per (edge, class): the result's `series`
//! (docs/json-schema.md).
//!
//! A send is counted in the interval that holds its time in the window (`LiveSend::ts_ns`:
//! the capture time of its first payload byte, or the running clock when it reached the stage
//! after a later send), and with the figures it adds to its edge when it is folded, that is
//! with its final class (a WRITE reclassified as redirection because the receiver wrote the
//! same blocks on stays in the interval of the WRITE). So the rows of an (edge, class) sum to
//! that edge entry's figures exactly.
//!
//! Intervals are aligned to multiples of the interval since the Unix epoch, and only
//! intervals with bytes have rows. Sends are folded in time order, so rows are appended in
//! interval order and only the latest interval is ever added to.
//!
//! Memory: one row is 72 bytes. A run of days at 1 s would hold hundreds of thousands of
//! intervals per (edge, class), so the series is capped at `MAX_INTERVALS` intervals with bytes
//! and `MAX_ROWS` rows (about 19 MB): past either, the interval doubles and neighbouring
//! intervals merge (every figure stays exact; only the resolution drops), as often as needed.
//! The result says so (`coarsenings`, `interval_seconds` against `requested_interval_seconds`,
//! finding `series_coarsened`). Coarsening rather than dropping keeps the sums equal to the
//! edge totals; rather than a fixed cap on time, it keeps a short capture at full resolution.

use super::attribution::Class;
use super::figures::Figures;
use crate::fasthash::FastMap;
use serde::Serialize;

/// Default interval (`--interval`, 1 s).
pub const DEFAULT_INTERVAL_NS: u64 = 1_000_000_000;
/// Accepted intervals: 1 µs to one day (the bounds below keep a short interval affordable).
pub const MIN_INTERVAL_NS: u64 = 1_000;
pub const MAX_INTERVAL_NS: u64 = 86_400_000_000_000;
/// Intervals with bytes kept before the interval doubles.
pub const MAX_INTERVALS: usize = 10_000;
/// Rows (interval × edge × class with bytes) kept before the interval doubles.
pub const MAX_ROWS: usize = 1 << 18;

#[derive(Clone, Copy, Debug)]
struct Row {
    /// Index of the interval: it starts at `interval * interval_ns` ns since the epoch.
    interval: u64,
    edge: u32,
    class: Class,
    figures: Figures,
}

/// The series being built by the ordered stage.
#[derive(Debug)]
pub struct Series {
    requested_ns: u64,
    interval_ns: u64,
    rows: Vec<Row>,
    /// Rows of the latest interval by (edge, class index).
    current: FastMap<(u32, usize), usize>,
    current_interval: Option<u64>,
    /// Intervals that have rows.
    intervals: usize,
    coarsenings: u32,
    max_intervals: usize,
    max_rows: usize,
}

impl Series {
    pub fn new(interval_ns: u64) -> Series {
        Series::with_caps(interval_ns, MAX_INTERVALS, MAX_ROWS)
    }

    pub fn with_caps(interval_ns: u64, max_intervals: usize, max_rows: usize) -> Series {
        let interval_ns = interval_ns.clamp(1, MAX_INTERVAL_NS);
        Series {
            requested_ns: interval_ns,
            interval_ns,
            rows: Vec::new(),
            current: FastMap::default(),
            current_interval: None,
            intervals: 0,
            coarsenings: 0,
            max_intervals: max_intervals.max(1),
            max_rows: max_rows.max(1),
        }
    }

    /// Add what one send added to (edge, class), at the send's window time `ts_ns`.
    pub fn add(&mut self, ts_ns: u64, edge: u32, class: Class, f: &Figures) {
        if f.is_empty() {
            return;
        }
        // Folded sends come in time order; a time before the latest interval (which the
        // stage never hands over) is counted in the latest one rather than reorder rows.
        let k = (ts_ns / self.interval_ns).max(self.current_interval.unwrap_or(0));
        if self.current_interval != Some(k) {
            self.current_interval = Some(k);
            self.current.clear();
            self.intervals += 1;
        }
        match self.current.get(&(edge, class.index())) {
            Some(&i) => self.rows[i].figures.add(f),
            None => {
                self.current.insert((edge, class.index()), self.rows.len());
                self.rows.push(Row { interval: k, edge, class, figures: *f });
            }
        }
        // One interval cannot be split further (its rows are bounded by the edges); a doubling
        // that would overflow is not made (times spanning centuries of hostile timestamps).
        while (self.intervals > self.max_intervals || self.rows.len() > self.max_rows)
            && self.intervals > 1
            && self.interval_ns <= u64::MAX / 2
        {
            self.coarsen();
        }
    }

    /// Double the interval: rows of neighbouring intervals (2k, 2k+1) merge.
    fn coarsen(&mut self) {
        self.interval_ns *= 2;
        self.coarsenings += 1;
        let mut out: Vec<Row> = Vec::with_capacity(self.rows.len());
        let mut group: FastMap<(u32, usize), usize> = FastMap::default();
        let mut group_interval = None;
        let mut intervals = 0;
        for r in self.rows.drain(..) {
            let k = r.interval / 2;
            if group_interval != Some(k) {
                group_interval = Some(k);
                group.clear();
                intervals += 1;
            }
            match group.get(&(r.edge, r.class.index())) {
                Some(&i) => out[i].figures.add(&r.figures),
                None => {
                    group.insert((r.edge, r.class.index()), out.len());
                    out.push(Row { interval: k, ..r });
                }
            }
        }
        self.rows = out;
        self.intervals = intervals;
        self.current_interval = group_interval;
        self.current = group;
    }

    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    pub fn coarsenings(&self) -> u32 {
        self.coarsenings
    }

    /// The serialisable series; `edge_names(edge)` gives an edge's (src, dst) node names.
    pub fn report(&self, edge_names: impl Fn(u32) -> (String, String)) -> SeriesReport {
        // Whole seconds and nanoseconds apart, so a start prints as the decimal it is
        // (1738238400.002, not 1738238400.0019999).
        let secs = |k: u64| {
            let ns = u128::from(k) * u128::from(self.interval_ns);
            (ns / 1_000_000_000) as f64 + (ns % 1_000_000_000) as f64 / 1e9
        };
        let mut rows: Vec<SeriesRow> = self
            .rows
            .iter()
            .map(|r| {
                let (src, dst) = edge_names(r.edge);
                SeriesRow { interval: r.interval, t: secs(r.interval), src, dst, class: r.class, figures: r.figures }
            })
            .collect();
        rows.sort_by(|a, b| (a.interval, &a.src, &a.dst, a.class.name()).cmp(&(b.interval, &b.src, &b.dst, b.class.name())));
        SeriesReport {
            interval_seconds: self.interval_ns as f64 / 1e9,
            requested_interval_seconds: self.requested_ns as f64 / 1e9,
            coarsenings: self.coarsenings,
            start: self.rows.first().map(|r| secs(r.interval)),
            intervals: self.intervals as u64,
            max_intervals: self.max_intervals as u64,
            max_rows: self.max_rows as u64,
            rows,
        }
    }
}

/// `series` in the result JSON.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeriesReport {
    /// The interval of the rows (seconds); `requested_interval_seconds` doubled `coarsenings` times.
    pub interval_seconds: f64,
    pub requested_interval_seconds: f64,
    pub coarsenings: u32,
    /// Start of the first interval with bytes (seconds since the epoch; null when none).
    pub start: Option<f64>,
    /// Intervals that have rows.
    pub intervals: u64,
    pub max_intervals: u64,
    pub max_rows: u64,
    /// One row per interval × edge × class with bytes; by interval, then src, dst, class name.
    pub rows: Vec<SeriesRow>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SeriesRow {
    /// Skipped in the JSON: `t` says the same.
    #[serde(skip)]
    pub interval: u64,
    /// Start of the interval (seconds since the epoch).
    pub t: f64,
    pub src: String,
    pub dst: String,
    pub class: Class,
    #[serde(flatten)]
    pub figures: Figures,
}

#[cfg(test)]
mod tests;
