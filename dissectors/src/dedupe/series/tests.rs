use super::*;

const S: u64 = 1_000_000_000;

fn fig(payload: u64, unique: u64) -> Figures {
    Figures {
        payload_bytes: payload,
        nontrivial_bytes: payload,
        unique_bytes: unique,
        per_copy_duplicate_bytes: payload - unique,
        sends: 1,
        ..Default::default()
    }
}

fn names(e: u32) -> (String, String) {
    (format!("n{e}"), format!("n{}", e + 1))
}

fn sum(r: &SeriesReport, src: &str, class: Class) -> Figures {
    let mut f = Figures::default();
    for row in r.rows.iter().filter(|x| x.src == src && x.class == class) {
        f.add(&row.figures);
    }
    f
}

#[test]
fn rows_by_aligned_interval_edge_and_class() {
    let mut s = Series::new(S);
    // 10.2 s and 10.9 s share interval 10; 12.0 s is interval 12 (11 has no bytes: no row).
    s.add(10 * S + S / 5, 0, Class::Replication, &fig(100, 100));
    s.add(10 * S + 9 * S / 10, 0, Class::Replication, &fig(50, 0));
    s.add(10 * S + 9 * S / 10, 1, Class::Redirection, &fig(7, 7));
    s.add(12 * S, 0, Class::Replication, &fig(1, 1));
    s.add(12 * S, 0, Class::Client, &Figures::default()); // empty: no row
    let r = s.report(names);
    assert_eq!(r.start, Some(10.0));
    assert_eq!(r.intervals, 2);
    assert_eq!(r.coarsenings, 0);
    let got: Vec<(f64, &str, Class, u64)> =
        r.rows.iter().map(|x| (x.t, x.src.as_str(), x.class, x.figures.payload_bytes)).collect();
    assert_eq!(
        got,
        vec![
            (10.0, "n0", Class::Replication, 150),
            (10.0, "n1", Class::Redirection, 7),
            (12.0, "n0", Class::Replication, 1),
        ]
    );
    assert_eq!(r.rows[0].figures.unique_bytes, 100);
    assert_eq!(r.rows[0].figures.per_copy_duplicate_bytes, 50);
    assert_eq!(r.rows[0].figures.sends, 2);
    let j = serde_json::to_value(&r).unwrap();
    assert_eq!(j["rows"][0]["class"], "replication");
    assert_eq!(j["rows"][0]["t"], 10.0);
    assert!(j["rows"][0].get("interval").is_none());
}

#[test]
fn coarsening_keeps_every_figure_and_bounds_the_rows() {
    let mut s = Series::with_caps(S, 100, 150);
    let mut total0 = Figures::default();
    let mut total1 = Figures::default();
    for i in 0..1000u64 {
        let a = fig(4096 + i, 4096);
        s.add(i * S, 0, Class::Replication, &a);
        total0.add(&a);
        if i % 3 == 0 {
            let b = fig(10, 10);
            s.add(i * S + 1, 1, Class::Redirection, &b);
            total1.add(&b);
        }
        assert!(s.intervals <= 100 && s.rows.len() <= 150, "at {i}: {} intervals {} rows", s.intervals, s.rows.len());
    }
    let r = s.report(names);
    assert_eq!(sum(&r, "n0", Class::Replication), total0);
    assert_eq!(sum(&r, "n1", Class::Redirection), total1);
    // 1000 intervals of 1 s under a cap of 100 intervals and 150 rows (2 rows per interval):
    // 16 s gives 63 intervals and 126 rows.
    assert_eq!(r.coarsenings, 4);
    assert_eq!(r.interval_seconds, 16.0);
    assert_eq!(r.requested_interval_seconds, 1.0);
    assert_eq!(r.intervals, 63);
    // Intervals stay aligned to multiples of the interval since the epoch.
    assert!(r.rows.iter().all(|x| x.t % 16.0 == 0.0));
}

#[test]
fn hostile_times_stay_bounded() {
    // Times spanning the whole u64 range (a capture with garbage timestamps): the interval
    // doubles until the caps hold or it cannot double again; nothing overflows.
    let mut s = Series::with_caps(MIN_INTERVAL_NS, 4, 8);
    for (i, t) in [0, 1, u64::MAX / 3, u64::MAX / 2, u64::MAX - 1, u64::MAX].into_iter().enumerate() {
        s.add(t, i as u32, Class::Client, &fig(1, 1));
    }
    let r = s.report(names);
    assert!(r.intervals <= 4);
    assert_eq!(r.rows.iter().map(|x| x.figures.payload_bytes).sum::<u64>(), 6);
}

#[test]
fn a_time_before_the_latest_interval_counts_in_it() {
    let mut s = Series::new(S);
    s.add(5 * S, 0, Class::Client, &fig(1, 1));
    s.add(3 * S, 0, Class::Client, &fig(2, 2));
    let r = s.report(names);
    assert_eq!(r.rows.len(), 1);
    assert_eq!((r.rows[0].t, r.rows[0].figures.payload_bytes), (5.0, 3));
}

#[test]
fn interval_starts_are_the_decimals_they_are() {
    let mut s = Series::new(1_000_000);
    s.add(1_738_238_400_002_500_000, 0, Class::Client, &fig(1, 1));
    let r = s.report(names);
    assert_eq!(r.rows[0].t, 1_738_238_400.002);
    assert_eq!(serde_json::to_string(&r.rows[0].t).unwrap(), "1738238400.002");
}

#[test]
fn a_day_at_one_second_ends_at_sixteen_seconds() {
    // The documented example (docs/json-schema.md): 86,400 one-second intervals with bytes on
    // two edges, one class each, under the default bounds.
    let mut s = Series::new(S);
    let t0 = 1_738_238_400 * S;
    for i in 0..86_400u64 {
        s.add(t0 + i * S, 0, Class::Replication, &fig(8192, 4096));
        s.add(t0 + i * S + 1, 1, Class::Redirection, &fig(4096, 4096));
    }
    let r = s.report(names);
    assert_eq!((r.interval_seconds, r.coarsenings, r.intervals), (16.0, 4, 5_400));
    assert_eq!(r.rows.len(), 10_800);
    assert_eq!(sum(&r, "n0", Class::Replication).payload_bytes, 86_400 * 8192);
    assert_eq!(sum(&r, "n1", Class::Redirection).sends, 86_400);
    assert!(s.rows.capacity() <= MAX_ROWS);
}
