//! The console's subscriber search on a table of 1,000,000 profiles: a
//! whole MSISDN (an index look-up), leading MSISDN digits (one scan of
//! the table per page, keeping the page's smallest IMSIs) and leading IMSI
//! digits (a range of the ordered IMSI index). The figures in
//! docs/console.md come from here.

use criterion::{criterion_group, criterion_main, Criterion};
use pcrf::subscriber::{Subscriber, SubscriberTable};
use std::hint::black_box;
use std::sync::Arc;

const SUBSCRIBERS: u64 = 1_000_000;

fn table() -> SubscriberTable {
    let t = SubscriberTable::default();
    for i in 0..SUBSCRIBERS {
        t.put(Arc::new(Subscriber {
            imsi: format!("00101{i:010}"),
            msisdn: Some(format!("4917{i:08}")),
            plan: Some("basic".into()),
            ..Default::default()
        }));
    }
    t
}

fn prefix<'a>(q: &'a str) -> impl Fn(&Subscriber) -> bool + 'a {
    move |s: &Subscriber| {
        s.imsi.starts_with(q) || s.msisdn.as_deref().is_some_and(|m| m.starts_with(q))
    }
}

fn search(c: &mut Criterion) {
    let t = table();
    let mut g = c.benchmark_group("search_1m");
    g.sample_size(20);
    g.bench_function("msisdn_exact", |b| {
        b.iter(|| t.by_msisdn(black_box("491700123456")))
    });
    // Every profile matches: the first page of 20, then a page deep in.
    g.bench_function("prefix_all_first_page", |b| {
        b.iter(|| t.scan(prefix(black_box("00101")), None, 20))
    });
    g.bench_function("prefix_all_page_after_500000", |b| {
        b.iter(|| t.scan(prefix(black_box("00101")), Some("001010000500000"), 20))
    });
    // A few match: the scan still reads every profile.
    g.bench_function("prefix_10_matches", |b| {
        b.iter(|| t.scan(prefix(black_box("001010000123")), None, 20))
    });
    // Leading IMSI digits through the ordered index instead.
    g.bench_function("imsi_index_first_page", |b| {
        b.iter(|| t.imsi_page(black_box("00101"), None, 20))
    });
    g.bench_function("imsi_index_page_after_500000", |b| {
        b.iter(|| t.imsi_page(black_box("00101"), Some("001010000500000"), 20))
    });
    g.finish();
}

criterion_group!(benches, search);
criterion_main!(benches);
