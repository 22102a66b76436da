//! Measurement helpers of `just bench` (`e2e/benches/bench/`): latency percentiles, process
//! figures read from `/proc`, request counts read from the registry's access log and the
//! operator's `/metrics`, the machine description and the markdown report. Everything here
//! except [`Machine::detect`] and [`ProcessSample::read`] is pure.

use std::{collections::BTreeMap, time::Duration};

/// The `p`-th percentile (0–100) of ascending `sorted` samples, nearest-rank method: the
/// smallest sample with at least `p` % of the samples at or below it. `None` when empty.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Percentiles of a set of latencies, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latencies {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest sample.
    pub max: f64,
}

impl Latencies {
    /// Summarises `samples` (any order); `None` when there are none.
    pub fn of(samples: &[Duration]) -> Option<Self> {
        let mut secs: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
        secs.sort_by(f64::total_cmp);
        Some(Self {
            count: secs.len(),
            p50: percentile(&secs, 50.0)?,
            p95: percentile(&secs, 95.0)?,
            p99: percentile(&secs, 99.0)?,
            max: *secs.last()?,
        })
    }
}

/// Parses a list of push scenario sizes such as `1,27,1000,1000@500`: `N` pushes, or `N@R`
/// pushes with the registry rate limit set to `R` requests per second.
pub fn parse_push_sizes(text: &str) -> Result<Vec<(usize, Option<u32>)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|entry| {
            let number = |s: &str| {
                s.trim()
                    .replace('_', "")
                    .parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{entry:?} is not N or N@RATE (positive numbers)"))
            };
            Ok(match entry.split_once('@') {
                Some((n, rate)) => (number(n)? as usize, Some(number(rate)?)),
                None => (number(entry)? as usize, None),
            })
        })
        .collect()
}

/// CPU time (user + system, including waited-for children) in clock ticks, from the text of
/// `/proc/PID/stat`. The command name may hold spaces and parentheses, so fields are counted
/// from the last `)`.
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime 14, stime 15, cutime 16, cstime 17.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(field(14)? + field(15)? + field(16)? + field(17)?)
}

/// A `kB` line of `/proc/PID/status` (`VmRSS`, `VmHWM`, …), in KiB.
pub fn status_kib(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        (name == key).then(|| value.split_whitespace().next()?.parse().ok())?
    })
}

/// CPU time and memory of a process at one moment.
#[derive(Debug, Clone, Copy)]
pub struct ProcessSample {
    /// When it was taken.
    pub at: std::time::Instant,
    /// CPU time, clock ticks.
    pub ticks: u64,
    /// Resident set, KiB.
    pub rss_kib: u64,
    /// Peak resident set since start, KiB.
    pub hwm_kib: u64,
}

impl ProcessSample {
    /// Reads `/proc/PID/{stat,status}`; `None` when the process is gone.
    pub fn read(pid: u32) -> Option<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        Some(Self {
            at: std::time::Instant::now(),
            ticks: cpu_ticks(&stat)?,
            rss_kib: status_kib(&status, "VmRSS")?,
            hwm_kib: status_kib(&status, "VmHWM")?,
        })
    }

    /// Share of one core used between `earlier` and `self`, in percent, with `ticks_per_second`
    /// clock ticks per second (`getconf CLK_TCK`).
    pub fn cpu_percent_since(&self, earlier: &Self, ticks_per_second: u64) -> f64 {
        let wall = self.at.duration_since(earlier.at).as_secs_f64();
        if wall <= 0.0 || ticks_per_second == 0 {
            return f64::NAN;
        }
        let cpu = self.ticks.saturating_sub(earlier.ticks) as f64 / ticks_per_second as f64;
        100.0 * cpu / wall
    }
}

/// Open file descriptors of a process (sockets included); `None` when it is gone.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// KiB as MiB.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Requests one client made to a CNCF distribution registry, counted from its access log.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RegistryRequests {
    /// `GET /v2/<repo>/tags/list` (each page counts) by repository.
    pub tag_lists: BTreeMap<String, u64>,
    /// `HEAD /v2/<repo>/manifests/<ref>`.
    pub manifest_heads: u64,
    /// `GET /v2/<repo>/manifests/<ref>`.
    pub manifest_gets: u64,
    /// Any other request.
    pub other: u64,
    /// Requests answered 401 (authentication challenges; not counted above).
    pub unauthorized: u64,
}

impl RegistryRequests {
    /// Tag-list requests in all.
    pub fn tag_list_total(&self) -> u64 {
        self.tag_lists.values().sum()
    }

    /// Most tag-list requests made for one repository.
    pub fn tag_list_max_per_repository(&self) -> u64 {
        self.tag_lists.values().copied().max().unwrap_or(0)
    }
}

/// Counts the requests of clients whose `User-Agent` starts with `user_agent` in the text of a
/// distribution registry log (combined access-log lines such as
/// `127.0.0.1 - - [date] "GET /v2/team/app/tags/list?n=100 HTTP/1.1" 200 52 "" "imagewatch/0.1.0"`;
/// other lines are skipped). Requests answered 401 are authentication challenges, counted
/// apart.
pub fn count_registry_requests(log: &str, user_agent: &str) -> RegistryRequests {
    count_registry_requests_by(log, |agent| agent.starts_with(user_agent))
}

/// [`count_registry_requests`] of the clients whose `User-Agent` satisfies `client`.
pub fn count_registry_requests_by(log: &str, client: impl Fn(&str) -> bool) -> RegistryRequests {
    let mut counts = RegistryRequests::default();
    for line in log.lines() {
        let Some((request, status, agent)) = access_log_fields(line) else {
            continue;
        };
        if !client(agent) {
            continue;
        }
        if status == "401" {
            counts.unauthorized += 1;
            continue;
        }
        let mut parts = request.split_whitespace();
        let (Some(method), Some(uri)) = (parts.next(), parts.next()) else {
            continue;
        };
        let path = uri.split('?').next().unwrap_or(uri);
        let name = path.strip_prefix("/v2/");
        match (method, name) {
            ("GET", Some(name)) if name.ends_with("/tags/list") => {
                let repo = name.trim_end_matches("/tags/list").to_string();
                *counts.tag_lists.entry(repo).or_default() += 1;
            }
            ("HEAD", Some(name)) if name.contains("/manifests/") => counts.manifest_heads += 1,
            ("GET", Some(name)) if name.contains("/manifests/") => counts.manifest_gets += 1,
            _ => counts.other += 1,
        }
    }
    counts
}

/// `(request line, status, user agent)` of a combined access-log line.
fn access_log_fields(line: &str) -> Option<(&str, &str, &str)> {
    let after_date = &line[line.find("] \"")? + 3..];
    let end = after_date.find('"')?;
    let request = &after_date[..end];
    let status = after_date[end + 1..].split_whitespace().next()?;
    let trimmed = line.trim_end().strip_suffix('"')?;
    let agent = &trimmed[trimmed.rfind('"')? + 1..];
    Some((request, status, agent))
}

/// Sum of the samples of metric `name` in a Prometheus text exposition whose label set
/// contains every `key="value"` of `labels`.
pub fn metric_sum(exposition: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            let (label_set, value) = match rest.strip_prefix('{') {
                Some(inner) => {
                    let (set, value) = inner.split_once('}')?;
                    (set, value)
                }
                None if rest.starts_with(' ') => ("", rest),
                None => return None,
            };
            labels
                .iter()
                .all(|(k, v)| label_set.split(',').any(|kv| kv == format!("{k}=\"{v}\"")))
                .then(|| value.split_whitespace().next()?.parse::<f64>().ok())?
        })
        .sum()
}

/// The `q` quantile (0–1) of the histogram `name` restricted to the series with label
/// `label`, over what was observed between two expositions of a process's metrics
/// (interpolated within its bucket, as Prometheus' `histogram_quantile` does); `None` when
/// nothing was observed in between.
pub fn histogram_quantile_between(
    before: &str,
    after: &str,
    name: &str,
    label: (&str, &str),
    q: f64,
) -> Option<f64> {
    let prefix = format!("{name}_bucket{{");
    let wanted = format!("{}=\"{}\"", label.0, label.1);
    let buckets = |text: &str| -> Vec<(f64, f64)> {
        text.lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .filter_map(|l| l.split_once('}'))
            .filter(|(labels, _)| labels.split(',').any(|kv| kv == wanted))
            .filter_map(|(labels, value)| {
                let le = labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix("le=\""))?
                    .trim_end_matches('"');
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().ok()?
                };
                Some((le, value.split_whitespace().next()?.parse().ok()?))
            })
            .collect()
    };
    let old: BTreeMap<u64, f64> = buckets(before)
        .into_iter()
        .map(|(le, n)| (le.to_bits(), n))
        .collect();
    let mut delta: Vec<(f64, f64)> = buckets(after)
        .into_iter()
        .map(|(le, n)| (le, n - old.get(&le.to_bits()).copied().unwrap_or(0.0)))
        .collect();
    delta.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = total * q;
    let (mut lower, mut below) = (0.0, 0.0);
    for (le, count) in delta {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let within = (count - below).max(f64::MIN_POSITIVE);
            return Some(lower + (le - lower) * (rank - below) / within);
        }
        (lower, below) = (le, count);
    }
    None
}

/// Requests the API server served, by `VERB resource[/subresource]`, read from the
/// `apiserver_request_total` counter of its `/metrics`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ApiRequests(pub BTreeMap<String, f64>);

impl ApiRequests {
    /// The counts of a Prometheus text exposition of the API server.
    pub fn parse(exposition: &str) -> Self {
        let mut counts = BTreeMap::new();
        for line in exposition.lines() {
            let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = rest.split_once('}') else {
                continue;
            };
            let Some(value) = value
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<f64>().ok())
            else {
                continue;
            };
            let label = |key: &str| {
                labels
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix("=\"")?.strip_suffix('"'))
            };
            let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
                continue;
            };
            let key = match label("subresource").filter(|s| !s.is_empty()) {
                Some(sub) => format!("{verb} {resource}/{sub}"),
                None => format!("{verb} {resource}"),
            };
            *counts.entry(key).or_insert(0.0) += value;
        }
        Self(counts)
    }

    /// What was served after `earlier` (counts that did not move are left out).
    pub fn since(&self, earlier: &Self) -> Self {
        Self(
            self.0
                .iter()
                .filter_map(|(k, v)| {
                    let d = v - earlier.0.get(k).copied().unwrap_or(0.0);
                    (d > 0.0).then(|| (k.clone(), d))
                })
                .collect(),
        )
    }

    /// The requests of `resource` (and its subresources), most first, as
    /// `PATCH imagewatches/status 50,000, LIST imagewatches 1`.
    pub fn summary(&self, resources: &[&str]) -> String {
        let mut rows: Vec<(&String, f64)> = self
            .0
            .iter()
            .filter(|(k, _)| {
                let resource = k.split_once(' ').map_or("", |(_, r)| r);
                let resource = resource.split('/').next().unwrap_or_default();
                resources.contains(&resource)
            })
            .map(|(k, v)| (k, *v))
            .collect();
        rows.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        if rows.is_empty() {
            return "none".into();
        }
        rows.iter()
            .map(|(k, v)| format!("{k} {}", thousands(*v as u64)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The machine a benchmark ran on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// Logical CPUs.
    pub cores: usize,
    /// `model name` of `/proc/cpuinfo`.
    pub cpu: String,
    /// Memory, GiB (rounded).
    pub memory_gib: u64,
    /// Build profile of the measured operator binary.
    pub profile: String,
}

impl Machine {
    /// Reads `/proc/cpuinfo` and `/proc/meminfo`; `binary` is the measured operator.
    pub fn detect(binary: &std::path::Path) -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Self {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu: cpu_model(&cpuinfo).unwrap_or_else(|| "unknown CPU".into()),
            memory_gib: status_kib(&meminfo, "MemTotal").map_or(0, |k| (k + (1 << 19)) >> 20),
            profile: build_profile(binary).into(),
        }
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} cores ({}), {} GiB RAM, {} build of the operator",
            self.cores, self.cpu, self.memory_gib, self.profile
        )
    }
}

/// The `model name` of the first processor in `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_string())
    })
}

/// `release` or `debug`, from the target directory a binary was built into.
pub fn build_profile(binary: &std::path::Path) -> &'static str {
    if binary.components().any(|c| c.as_os_str() == "release") {
        "release"
    } else {
        "debug"
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    /// What was measured.
    pub metric: String,
    /// The target, or `—` for a figure without one.
    pub target: String,
    /// The measured value.
    pub measured: String,
    /// Whether the target was met; `None` without a target.
    pub pass: Option<bool>,
}

impl Check {
    /// A measured figure against a target.
    pub fn target(
        metric: impl Into<String>,
        target: impl Into<String>,
        measured: impl Into<String>,
        pass: bool,
    ) -> Self {
        Self {
            metric: metric.into(),
            target: target.into(),
            measured: measured.into(),
            pass: Some(pass),
        }
    }

    /// A figure reported without a target.
    pub fn info(metric: impl Into<String>, measured: impl Into<String>) -> Self {
        Self {
            metric: metric.into(),
            target: "—".into(),
            measured: measured.into(),
            pass: None,
        }
    }
}

/// The markdown table `metric | target | measured | result`.
pub fn render_table(checks: &[Check]) -> String {
    let mut out = String::from("| metric | target | measured | result |\n|---|---|---|---|\n");
    for c in checks {
        let result = match c.pass {
            Some(true) => "pass",
            Some(false) => "**FAIL**",
            None => "—",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            c.metric.replace('|', "\\|"),
            c.target.replace('|', "\\|"),
            c.measured.replace('|', "\\|"),
            result
        ));
    }
    out
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_requests_are_counted_by_verb_and_resource() {
        let before = ApiRequests::parse(concat!(
            "# TYPE apiserver_request_total counter\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"imagewatch.dev\",resource=\"imagewatches\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1alpha1\"} 10\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"secrets\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 3\n",
        ));
        let after = ApiRequests::parse(concat!(
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"imagewatch.dev\",resource=\"imagewatches\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1alpha1\"} 50010\n",
            "apiserver_request_total{code=\"409\",component=\"apiserver\",dry_run=\"\",group=\"imagewatch.dev\",resource=\"imagewatches\",scope=\"resource\",subresource=\"status\",verb=\"PATCH\",version=\"v1alpha1\"} 2\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"imagewatch.dev\",resource=\"imagewatches\",scope=\"namespace\",subresource=\"\",verb=\"LIST\",version=\"v1alpha1\"} 1\n",
            "apiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"secrets\",scope=\"resource\",subresource=\"\",verb=\"GET\",version=\"v1\"} 3\n",
            "apiserver_request_duration_seconds_count{verb=\"GET\",resource=\"secrets\"} 9\n",
        ));
        let served = after.since(&before);
        assert_eq!(served.0.get("PATCH imagewatches/status"), Some(&50_002.0));
        assert_eq!(served.0.get("GET secrets"), None);
        assert_eq!(
            served.summary(&["imagewatches", "secrets"]),
            "PATCH imagewatches/status 50,002, LIST imagewatches 1"
        );
        assert_eq!(served.summary(&["events"]), "none");
    }

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 50.0), Some(50.0));
        assert_eq!(percentile(&samples, 95.0), Some(95.0));
        assert_eq!(percentile(&samples, 99.0), Some(99.0));
        assert_eq!(percentile(&samples, 100.0), Some(100.0));
        assert_eq!(percentile(&samples, 0.0), Some(1.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[1.0, 2.0, 3.0], 50.0), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn latencies_sort_their_samples() {
        let l = Latencies::of(&[
            Duration::from_millis(300),
            Duration::from_millis(100),
            Duration::from_millis(200),
        ])
        .unwrap();
        assert_eq!((l.count, l.p50, l.max), (3, 0.2, 0.3));
        assert_eq!(l.p99, 0.3);
        assert!(Latencies::of(&[]).is_none());
    }

    #[test]
    fn push_sizes_with_and_without_a_rate() {
        assert_eq!(
            parse_push_sizes("1, 27,1_000,1000@500,").unwrap(),
            vec![(1, None), (27, None), (1000, None), (1000, Some(500))]
        );
        assert!(parse_push_sizes("0").is_err());
        assert!(parse_push_sizes("10@").is_err());
        assert!(parse_push_sizes("ten").is_err());
        assert_eq!(parse_push_sizes("").unwrap(), vec![]);
    }

    #[test]
    fn cpu_ticks_survive_odd_command_names() {
        let stat = "4242 (image watch (x)) S 1 4242 4242 0 -1 4194304 100 0 0 0 250 50 7 3 20 0 9 0 123 0 0";
        assert_eq!(cpu_ticks(stat), Some(250 + 50 + 7 + 3));
        assert_eq!(cpu_ticks("garbage"), None);
    }

    #[test]
    fn status_lines_in_kib() {
        let status = "Name:\timagewatch\nVmHWM:\t   52344 kB\nVmRSS:\t   41000 kB\n";
        assert_eq!(status_kib(status, "VmHWM"), Some(52344));
        assert_eq!(status_kib(status, "VmRSS"), Some(41000));
        assert_eq!(status_kib(status, "VmSwap"), None);
    }

    #[test]
    fn cpu_percent_of_one_core() {
        let t0 = std::time::Instant::now();
        let a = ProcessSample {
            at: t0,
            ticks: 1000,
            rss_kib: 0,
            hwm_kib: 0,
        };
        let b = ProcessSample {
            at: t0 + Duration::from_secs(100),
            ticks: 1500,
            ..a
        };
        assert!((b.cpu_percent_since(&a, 100) - 5.0).abs() < 1e-9);
    }

    #[test]
    fn registry_access_log_counts_one_client() {
        let log = r#"time="2026-01-01T00:00:00Z" level=info msg="response completed" http.request.method=GET http.request.uri="/v2/a/tags/list" http.request.useragent=imagewatch/0.1.0
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/team/a/tags/list HTTP/1.1" 200 40 "" "imagewatch/0.1.0"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/team/a/tags/list?n=100&last=v9 HTTP/1.1" 200 40 "" "imagewatch/0.1.0"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/team/b/tags/list HTTP/1.1" 200 40 "" "imagewatch/0.1.0"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "HEAD /v2/team/b/manifests/v1 HTTP/1.1" 200 0 "" "imagewatch/0.1.0"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/ HTTP/1.1" 401 87 "" "imagewatch/0.1.0"
127.0.0.1 - bench [30/Nov/2026:01:38:13 +0000] "GET /v2/team/b/manifests/v1 HTTP/1.1" 200 509 "" "imagewatch/0.1.0"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/team/a/tags/list HTTP/1.1" 200 40 "" "curl/7.88.1"
127.0.0.1 - - [30/Nov/2026:01:38:13 +0000] "GET /v2/team/c/tags/list HTTP/1.1" 401 87 "" "imagewatch/0.1.0"
"#;
        let c = count_registry_requests(log, "imagewatch/");
        assert_eq!(c.tag_lists.get("team/a"), Some(&2));
        assert_eq!(c.tag_lists.get("team/b"), Some(&1));
        assert_eq!(c.tag_list_total(), 3);
        assert_eq!(c.tag_list_max_per_repository(), 2);
        assert_eq!(c.manifest_heads, 1);
        assert_eq!(c.manifest_gets, 1);
        assert_eq!(c.other, 0);
        assert_eq!(c.unauthorized, 2);
    }

    #[test]
    fn metric_sums_filter_on_labels() {
        let text = "# HELP imagewatch_events Registry events\n# TYPE imagewatch_events counter\nimagewatch_events_total{source=\"distribution\",outcome=\"ignored\"} 40\nimagewatch_events_total{source=\"distribution\",outcome=\"matched\"} 2\nimagewatch_events_total{source=\"sqs\",outcome=\"matched\"} 5\nimagewatch_commits_total 3\nimagewatch_commits_total_x 9\n";
        assert_eq!(
            metric_sum(
                text,
                "imagewatch_events_total",
                &[("source", "distribution")]
            ),
            42.0
        );
        assert_eq!(metric_sum(text, "imagewatch_events_total", &[]), 47.0);
        assert_eq!(metric_sum(text, "imagewatch_commits_total", &[]), 3.0);
        assert_eq!(metric_sum(text, "imagewatch_absent", &[]), 0.0);
    }

    #[test]
    fn machine_description() {
        let cpuinfo = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\nflags\t: fpu\n";
        assert_eq!(
            cpu_model(cpuinfo).as_deref(),
            Some("Intel(R) Xeon(R) Processor")
        );
        assert_eq!(
            build_profile(std::path::Path::new("/w/target/release/imagewatch")),
            "release"
        );
        assert_eq!(
            build_profile(std::path::Path::new("/w/target/debug/imagewatch")),
            "debug"
        );
    }

    #[test]
    fn table_marks_failures() {
        let table = render_table(&[
            Check::target("peak RSS", "≤ 200 MiB", "250 MiB", false),
            Check::target("p50", "≤ 1 s", "0.3 s", true),
            Check::info("commits", "4 | 5"),
        ]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "| metric | target | measured | result |");
        assert_eq!(lines[2], "| peak RSS | ≤ 200 MiB | 250 MiB | **FAIL** |");
        assert_eq!(lines[3], "| p50 | ≤ 1 s | 0.3 s | pass |");
        assert_eq!(lines[4], "| commits | — | 4 \\| 5 | — |");
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(10_000), "10,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn a_quantile_is_read_from_the_histogram_difference() {
        let name = "imagewatch_push_stage_seconds";
        let before = "imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"0.01\"} 1\n\
                      imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"0.1\"} 1\n\
                      imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"+Inf\"} 1\n";
        let after = "imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"0.01\"} 1\n\
                     imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"0.1\"} 5\n\
                     imagewatch_push_stage_seconds_bucket{stage=\"pushed\",le=\"+Inf\"} 5\n\
                     imagewatch_push_stage_seconds_bucket{stage=\"listed\",le=\"0.01\"} 9\n";
        // Four new observations, all in (0.01, 0.1]: the median halfway through the bucket.
        let p50 = histogram_quantile_between(before, after, name, ("stage", "pushed"), 0.5)
            .expect("observed");
        assert!((p50 - 0.055).abs() < 1e-9, "{p50}");
        assert_eq!(
            histogram_quantile_between(after, after, name, ("stage", "pushed"), 0.5),
            None
        );
    }
}
