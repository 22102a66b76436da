//! Start and stop of the operator process on the real parts: ready with no ImageWatch and no
//! AWS (no instance-metadata lookup), and SIGTERM handing back SQS messages so that the other
//! replicas consuming the queue get them at once.

use std::{
    io::Read,
    net::TcpListener,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use imagewatch_e2e::{
    Ground, Operator, TestNamespace, ground::random_suffix, operator::metric, setup::moto,
    setup::moto_credentials, wait_until,
};

/// A loopback listener standing in for the EC2 instance metadata service: it counts the
/// connections it gets.
fn metadata_trap() -> anyhow::Result<(String, Arc<AtomicUsize>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let mut stream = stream;
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
        }
    });
    Ok((url, hits))
}

async fn readyz(addr: &str) -> Option<(u16, String)> {
    let response = reqwest::get(format!("http://{addr}/readyz")).await.ok()?;
    let status = response.status().as_u16();
    Some((status, response.text().await.unwrap_or_default()))
}

/// No AWS settings at all, no ImageWatch: the operator turns ready on its caches and
/// listeners alone, and never reaches for instance metadata (whose address is pointed at a
/// local trap, so a regression stays on loopback and is counted).
#[tokio::test]
async fn ready_with_no_watch_and_no_aws_and_no_instance_metadata_lookup() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "noaws").await?;
    let (trap, hits) = metadata_trap()?;
    let webhook = format!("127.0.0.1:{}", imagewatch_e2e::operator::free_port()?);
    let started = Instant::now();
    let mut operator = Operator::start_without_aws(
        ground,
        &ns.name,
        &ground.kubeconfig,
        &[
            "--namespace",
            &ns.name,
            "--pod-namespace",
            &ns.name,
            "--webhook-addr",
            &webhook,
        ],
        &[("AWS_EC2_METADATA_SERVICE_ENDPOINT", trap.as_str())],
    )?;
    let addr = operator.metrics_addr.clone();
    wait_until("/readyz 200", Duration::from_secs(30), || async {
        Ok(readyz(&addr).await.filter(|(s, _)| *s == 200))
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}\n{}", operator.log_tail(40)))?;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "ready after {took:?}");
    // The webhook listener is part of being ready: it answers.
    let hook = reqwest::Client::new()
        .post(format!("http://{webhook}/hooks/distribution"))
        .body("{}")
        .send()
        .await?;
    // No webhook Secret in the namespace: every provider is disabled, but the listener answers.
    assert!(hook.status().is_client_error(), "{}", hook.status());

    let log = std::fs::read_to_string(&operator.log)?;
    for needle in [
        "169.254.169.254",
        "imds",
        "IMDS",
        "instance metadata",
        "ec2 metadata",
    ] {
        assert!(!log.contains(needle), "log mentions {needle}:\n{log}");
    }
    assert!(
        !log.contains('\u{1b}'),
        "ANSI colour in a log that is not a terminal"
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "instance metadata was asked"
    );

    // SIGTERM: /readyz turns 503 at once, the process exits cleanly.
    assert!(
        operator.terminate(Duration::from_secs(30))?,
        "clean exit on SIGTERM"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    Ok(())
}

/// (visible, in flight) messages of the queue.
fn queue_depth(queue: &str, env: &[(String, String)]) -> anyhow::Result<(u64, u64)> {
    let out = moto(&["queue-depth", queue], env)?;
    let mut numbers = out.split_whitespace().filter_map(|n| n.parse::<u64>().ok());
    Ok((
        numbers.next().unwrap_or(u64::MAX),
        numbers.next().unwrap_or(u64::MAX),
    ))
}

/// Three replicas long-poll one queue; one gets SIGTERM, then a burst is pushed. Messages the
/// stopping replica's last receive brings are handed back at once, so the burst drains long
/// before the queue's 60 s visibility timeout.
#[tokio::test]
async fn stopping_one_of_three_sqs_consumers_strands_no_message() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let moto_url = ground.var("IMAGEWATCH_MOTO_URL")?.to_string();
    let env = moto_credentials(ground)?;
    let suffix = random_suffix();
    let queue = moto(&["create-queue", &format!("iw-three-{suffix}"), "60"], &env)?;
    let queue = queue.lines().last().unwrap_or_default().to_string();
    let ns = TestNamespace::create(ground, "sqs3").await?;
    let operator_env: Vec<(&str, &str)> =
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let flags = [
        "--namespace",
        ns.name.as_str(),
        "--pod-namespace",
        ns.name.as_str(),
        "--aws-endpoint-url",
        moto_url.as_str(),
        "--sqs-queue-url",
        queue.as_str(),
        "--sqs-default-account",
        "123456789012",
    ];
    let mut replicas = Vec::new();
    for i in 0..3 {
        replicas.push(Operator::start_with_env(
            ground,
            &format!("{}-{i}", ns.name),
            &ground.kubeconfig,
            &flags,
            &operator_env,
        )?);
    }
    for r in &replicas {
        let addr = r.metrics_addr.clone();
        wait_until("a replica ready", Duration::from_secs(60), || async {
            Ok(readyz(&addr).await.filter(|(s, _)| *s == 200))
        })
        .await?;
    }
    // Every replica has a receive pending (it logged the start of consuming).
    for r in &replicas {
        wait_until("a replica consuming", Duration::from_secs(30), || async {
            Ok(std::fs::read_to_string(&r.log)
                .unwrap_or_default()
                .contains("consuming ECR events from SQS")
                .then_some(()))
        })
        .await?;
    }

    // SIGTERM to one replica; it waits for its pending receive, and we push meanwhile.
    let mut stopping = replicas.remove(0);
    let pid = stopping.pid().unwrap_or_default();
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()?;
    let repository = format!("three/app-{suffix}");
    moto(&["send-push-messages", &queue, &repository, "20"], &env)?;
    let pushed = Instant::now();
    assert!(
        stopping.terminate(Duration::from_secs(40))?,
        "the stopping replica exits cleanly after its last receive:\n{}",
        stopping.log_tail(30)
    );
    wait_until(
        "the burst to drain from the queue",
        Duration::from_secs(45),
        || async { Ok((queue_depth(&queue, &env)? == (0, 0)).then_some(())) },
    )
    .await?;
    let drained = pushed.elapsed();
    assert!(
        drained < Duration::from_secs(30),
        "a message waited for the visibility timeout: drained after {drained:?}"
    );
    let log = std::fs::read_to_string(&stopping.log)?;
    assert!(log.contains("stopped consuming from SQS"), "{log}");

    // The running replicas handled the burst between them; their counters are metrics
    // (exported every 5 s).
    wait_until(
        "the SQS counters exported",
        Duration::from_secs(20),
        || async {
            let mut delivered = 0.0;
            for r in &replicas {
                let text = r.metrics().await?;
                delivered += metric(&text, "imagewatch_sqs_messages_total{result=\"delivered\"}");
            }
            Ok((delivered >= 1.0).then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// A metrics address already in use stops the process at once, saying so: it never runs
/// without `/metrics` and `/readyz` (a second replica given the same port would otherwise
/// work unseen).
#[tokio::test]
async fn a_metrics_address_in_use_stops_the_process_with_the_reason() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "bindfail").await?;
    let taken = TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?.to_string();
    let mut operator = Operator::start_with_env(
        ground,
        &ns.name,
        &ground.kubeconfig,
        &["--namespace", &ns.name, "--pod-namespace", &ns.name],
        &[("IMAGEWATCH_METRICS_ADDR", addr.as_str())],
    )?;
    let operator = std::sync::Mutex::new(&mut operator);
    wait_until("the process to exit", Duration::from_secs(30), || async {
        let running = operator.lock().map(|mut o| o.is_running()).unwrap_or(true);
        Ok((!running).then_some(()))
    })
    .await?;
    let log = operator.lock().map(|o| o.log_tail(5)).unwrap_or_default();
    assert!(
        log.contains("metrics server: Address already in use"),
        "{log}"
    );
    drop(taken);
    Ok(())
}
