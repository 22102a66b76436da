//! Benchmark of the edit engine on a large multi-document file: planning an edit (find the
//! target, rewrite one scalar, verify the result) against finding the target alone. The edit
//! must stay linear and cheap: at most twice the cost of finding the target (its self-check
//! re-parses only the edited document, so it costs about as much as finding).
//!
//! Run: `cargo bench -p imagewatch --bench set_image` (part of `just bench`). Prints a
//! markdown table and exits non-zero when the ratio exceeds `IMAGEWATCH_BENCH_MAX_RATIO`
//! (default 2). Sizes (environment):
//!
//! | variable                         | default | meaning |
//! |----------------------------------|---------|---------|
//! | `IMAGEWATCH_BENCH_MANIFEST_MB`   | 3.5     | size of the generated file, in MB |
//! | `IMAGEWATCH_BENCH_ROUNDS`        | 15      | timed rounds of each; the median is reported |

use std::time::{Duration, Instant};

use imagewatch::manifests::{
    ImageChange, WorkloadKind, WorkloadTarget, find_workload_image, plan_workload_edit,
};

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `---`-separated Deployments with comments, quoting and two containers each, until the
/// text reaches `bytes`.
fn manifest(bytes: usize) -> (String, usize) {
    let mut text = String::with_capacity(bytes + 1024);
    let mut n = 0;
    while text.len() < bytes {
        text.push_str(&format!(
            "---\n# application {n}\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  \
             name: app-{n}\n  namespace: team-{team}\n  labels: {{app: app-{n}, tier: \"web\"}}\n\
             spec:\n  replicas: 2\n  template:\n    metadata:\n      labels:\n        app: \
             app-{n}\n    spec:\n      containers:\n      - name: app\n        image: \
             \"registry.example.com/team-{team}/app-{n}:v1.{n}.0\" # pinned by CI\n        \
             args: [--port=8080, --log-level=info]\n        env:\n        - name: MODE\n          \
             value: 'production'\n      - name: proxy\n        image: envoyproxy/envoy:v1.30.0\n",
            team = n % 17
        ));
        n += 1;
    }
    (text, n)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let megabytes: f64 = env_or("IMAGEWATCH_BENCH_MANIFEST_MB", 3.5);
    let rounds: usize = env_or("IMAGEWATCH_BENCH_ROUNDS", 15).max(1);
    let max_ratio: f64 = env_or("IMAGEWATCH_BENCH_MAX_RATIO", 2.0);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (text, documents) = manifest((megabytes * 1_000_000.0) as usize);
    // The last document: the whole file is read before it is found.
    let target = WorkloadTarget::new(
        WorkloadKind::Deployment,
        format!("app-{}", documents - 1),
        "app",
    );
    let files = [("apps.yaml", text.as_str())];
    let change = ImageChange::Tag("v2.0.0".into());

    let mut find = Vec::with_capacity(rounds);
    let mut plan = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let start = Instant::now();
        let found = find_workload_image(&files, &target).expect("target found");
        find.push(start.elapsed());
        std::hint::black_box(found);
        let start = Instant::now();
        let planned = plan_workload_edit(&files, &target, &change).expect("edit planned");
        plan.push(start.elapsed());
        assert!(planned.edit.is_some(), "an edit is needed");
        std::hint::black_box(planned);
    }
    let (find, plan) = (median(find), median(plan));
    let ratio = plan.as_secs_f64() / find.as_secs_f64();
    println!("### set-image on one large multi-document file\n");
    println!("| file | documents | find the target | plan the edit (find, edit, verify) | ratio |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.1} MB | {documents} | {:.1} ms | {:.1} ms | {ratio:.2}× |",
        text.len() as f64 / 1e6,
        find.as_secs_f64() * 1e3,
        plan.as_secs_f64() * 1e3,
    );
    println!("\nMedian of {rounds} rounds; the edit may cost at most {max_ratio}× finding.");
    if ratio > max_ratio {
        eprintln!("error: the edit costs {ratio:.2}× finding the target (at most {max_ratio}×)");
        std::process::exit(1);
    }
}
