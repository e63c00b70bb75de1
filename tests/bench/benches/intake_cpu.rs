//! Intake CPU time per request, excluding I/O and JSON text parsing: validation of the parsed
//! request against the built-in catalog and the template's limits, rendering and SMS segment
//! counting (inside `validate`), and the idempotency key (`Intent::from_request`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tocsin::domain::request::validate;
use tocsin::domain::template::Catalog;
use tocsin::domain::{Intent, Origin};
use tocsin_bench::workload::{alert_body, default_limits};

fn bench(c: &mut Criterion) {
    let body = alert_body(0);
    let limits = default_limits();
    let catalog = Catalog::builtin();
    let now = chrono::Utc::now();
    if let Err(errors) = validate(&body, catalog, &limits, now) {
        eprintln!("the bench request is invalid: {errors:?}");
        std::process::exit(1);
    }
    let (bench_group, bench_name) = tocsin_bench::cpu::INTAKE_BENCH;
    let mut g = c.benchmark_group(bench_group);
    g.bench_function(bench_name, |b| {
        b.iter(|| {
            validate(black_box(&body), catalog, &limits, now).map(|req| {
                Intent::from_request(
                    req,
                    Origin::Api,
                    tocsin::domain::producer::ProducerName::parse("monitoring").expect("producer"),
                    now,
                )
            })
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5));
    targets = bench
}
criterion_main!(benches);
