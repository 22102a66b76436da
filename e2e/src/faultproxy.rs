//! Fault injection in front of a real part of the ground: an HTTP/1.1 proxy, run by the test
//! process, that forwards to the real registry or git server until it is told to fail.
//!
//! The proxy reads each request's head (and forwards its body by its framing:
//! `Content-Length` or chunked), so it can decide per request; responses stream back
//! unchanged. Clients of the ground speak HTTP/1.1 without pipelining (reqwest, libgit2), so a
//! response is complete before the next request of a connection arrives.
//!
//! What it can be switched to ([`Fault`]): pass through; answer a status of its own (503,
//! 429 with `Retry-After`) without contacting the part; accept a request and never answer
//! (the client's timeout fires); drop the connection when a request arrives; refuse
//! connections (the listening socket is closed, so connecting fails with ECONNREFUSED). A
//! fault can be limited to requests whose request line contains a string
//! ([`FaultProxy::set_matching`]), e.g. only git pushes (`git-receive-pack`).
//!
//! Every switch closes the open connections, so nothing in flight escapes the new fault.
//! Every request is recorded ([`FaultProxy::seen`]) with the time and what was done with it,
//! so tests can count what a client sent during a fault.
//!
//! The proxy runs on a runtime of its own, on its own thread: it keeps serving while the test
//! blocks (running scripts, `git`, `kubectl`).
//!
//! [`FaultProxy::start_tls`] serves HTTPS with a given certificate (the ground's git server
//! certificate, which clients trust through the ground's CA) and forwards in plain HTTP to a
//! loopback part: a client that only speaks HTTPS to Git can still be put behind faults.

use std::{
    net::{SocketAddr, ToSocketAddrs},
    path::Path,
    sync::{Arc, Condvar, Mutex, PoisonError},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use anyhow::Context as _;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::{
        TcpListener, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
    sync::{oneshot, watch},
};
use tokio_rustls::TlsAcceptor;

/// What the proxy does with a request (or, for [`Fault::Refuse`], with a connection).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Forward to the real part.
    Pass,
    /// Answer with this status and JSON body, without contacting the part, then close.
    Status {
        /// HTTP status.
        status: u16,
        /// `Retry-After` in seconds, when set.
        retry_after: Option<u64>,
        /// Response body (JSON).
        body: String,
    },
    /// Read the request and never answer, until the next switch.
    Stall,
    /// Close the connection as soon as a request arrives, without answering.
    Drop,
    /// Accept no connections at all (the listening socket is closed).
    Refuse,
}

impl Fault {
    /// 503 with an OCI error body carrying `message`.
    pub fn unavailable(message: &str) -> Self {
        Self::Status {
            status: 503,
            retry_after: None,
            body: oci_error("UNAVAILABLE", message),
        }
    }

    /// 429 with `Retry-After: retry_after_secs` and an OCI error body carrying `message`.
    pub fn too_many_requests(retry_after_secs: u64, message: &str) -> Self {
        Self::Status {
            status: 429,
            retry_after: Some(retry_after_secs),
            body: oci_error("TOOMANYREQUESTS", message),
        }
    }
}

fn oci_error(code: &str, message: &str) -> String {
    serde_json::json!({"errors": [{"code": code, "message": message}]}).to_string()
}

/// What was done with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Forwarded to the part.
    Passed,
    /// Answered by the proxy with this status.
    Answered(u16),
    /// Held without an answer.
    Stalled,
    /// Its connection was closed.
    Dropped,
}

/// One request the proxy received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When its head was read.
    pub at: Instant,
    /// Method.
    pub method: String,
    /// Request target (path and query).
    pub target: String,
    /// What the proxy did.
    pub verdict: Verdict,
}

/// The current fault and the requests it applies to.
#[derive(Debug, Clone)]
struct Rule {
    fault: Fault,
    /// Only requests whose request line contains this; others pass.
    matching: Option<String>,
    /// How many more requests get the fault (`None`: every one); later ones pass.
    remaining: Option<u32>,
}

impl Rule {
    fn refuses(&self) -> bool {
        self.fault == Fault::Refuse
    }

    /// The fault for a request line (pure).
    fn fault_for(&self, request_line: &str) -> Fault {
        match &self.matching {
            Some(needle) if !request_line.contains(needle.as_str()) => Fault::Pass,
            _ if self.remaining == Some(0) => Fault::Pass,
            _ => self.fault.clone(),
        }
    }

    /// The fault for a request line, counting it against [`Rule::remaining`].
    fn take(&mut self, request_line: &str) -> Fault {
        let fault = self.fault_for(request_line);
        if fault != Fault::Pass
            && let Some(n) = self.remaining.as_mut()
        {
            *n = n.saturating_sub(1);
        }
        fault
    }
}

struct Shared {
    upstream: SocketAddr,
    addr: SocketAddr,
    /// Serve HTTPS to clients (the upstream is still spoken to in plain HTTP).
    tls: Option<TlsAcceptor>,
    rule: Mutex<Rule>,
    seen: Mutex<Vec<Seen>>,
    /// Bumped on every switch; connections close when it changes.
    generation: watch::Sender<u64>,
    /// The last generation the listener has acted on.
    applied: (Mutex<u64>, Condvar),
}

impl Shared {
    fn rule(&self) -> Rule {
        self.rule
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, method: &str, target: &str, verdict: Verdict) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Seen {
                at: Instant::now(),
                method: method.to_string(),
                target: target.to_string(),
                verdict,
            });
    }
}

/// A running fault proxy. Stops when dropped.
pub struct FaultProxy {
    shared: Arc<Shared>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream` (`host:port`), passing
    /// everything through.
    pub fn start(upstream: &str) -> anyhow::Result<Self> {
        Self::launch(upstream, None)
    }

    /// [`Self::start`], serving HTTPS to clients with the certificate chain `cert` and its
    /// private key `key` (PEM files); requests go on to `upstream` in plain HTTP.
    pub fn start_tls(upstream: &str, cert: &Path, key: &Path) -> anyhow::Result<Self> {
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject as _};
        let chain = CertificateDer::pem_file_iter(cert)
            .with_context(|| format!("reading {}", cert.display()))?
            .collect::<Result<Vec<_>, _>>()
            .with_context(|| format!("parsing {}", cert.display()))?;
        let key = PrivateKeyDer::from_pem_file(key)
            .with_context(|| format!("reading {}", key.display()))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
        Self::launch(upstream, Some(TlsAcceptor::from(Arc::new(config))))
    }

    fn launch(upstream: &str, tls: Option<TlsAcceptor>) -> anyhow::Result<Self> {
        let upstream = upstream
            .to_socket_addrs()
            .with_context(|| format!("resolving {upstream}"))?
            .next()
            .with_context(|| format!("{upstream} resolves to no address"))?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            upstream,
            addr,
            tls,
            rule: Mutex::new(Rule {
                fault: Fault::Pass,
                matching: None,
                remaining: None,
            }),
            seen: Mutex::default(),
            generation,
            applied: (Mutex::new(0), Condvar::new()),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        eprintln!("fault proxy: cannot start a runtime: {e}");
                        return;
                    }
                };
                runtime.block_on(async move {
                    tokio::select! {
                        () = listen(task_shared, listener) => {}
                        _ = stopped => {}
                    }
                });
            })?;
        Ok(Self {
            shared,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// `127.0.0.1:PORT` of the proxy.
    pub fn addr(&self) -> String {
        self.shared.addr.to_string()
    }

    /// Applies `fault` to every request (or connection). Returns once the listener has acted
    /// on it (closed or reopened) and open connections are told to close.
    pub fn set(&self, fault: Fault) -> anyhow::Result<()> {
        self.switch(Rule {
            fault,
            matching: None,
            remaining: None,
        })
    }

    /// Applies `fault` to requests whose request line (`METHOD target HTTP/1.1`) contains
    /// `needle`; others pass. [`Fault::Refuse`] cannot be limited and applies to all.
    pub fn set_matching(&self, fault: Fault, needle: &str) -> anyhow::Result<()> {
        self.switch(Rule {
            fault,
            matching: Some(needle.to_string()),
            remaining: None,
        })
    }

    /// Like [`FaultProxy::set_matching`], for the next `times` matching requests only; the
    /// ones after them pass.
    pub fn set_matching_times(&self, fault: Fault, needle: &str, times: u32) -> anyhow::Result<()> {
        self.switch(Rule {
            fault,
            matching: Some(needle.to_string()),
            remaining: Some(times),
        })
    }

    fn switch(&self, rule: Rule) -> anyhow::Result<()> {
        *self
            .shared
            .rule
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = rule;
        let mut wanted = 0;
        self.shared.generation.send_modify(|g| {
            *g += 1;
            wanted = *g;
        });
        let (lock, changed) = &self.shared.applied;
        let applied = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let (applied, timeout) = changed
            .wait_timeout_while(applied, Duration::from_secs(10), |a| *a < wanted)
            .unwrap_or_else(PoisonError::into_inner);
        anyhow::ensure!(
            !timeout.timed_out(),
            "fault proxy {} did not apply the switch (at {} of {wanted})",
            self.shared.addr,
            *applied
        );
        Ok(())
    }

    /// Every request received so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Requests received since `since` that got `verdict`.
    pub fn count_since(&self, since: Instant, verdict: Verdict) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.at >= since && s.verdict == verdict)
            .count()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Accepts connections while the rule allows; closes and reopens the listening socket when a
/// switch refuses or allows connections again.
async fn listen(shared: Arc<Shared>, listener: std::net::TcpListener) {
    let mut listener = match TcpListener::from_std(listener) {
        Ok(l) => Some(l),
        Err(e) => {
            eprintln!("fault proxy: {e}");
            return;
        }
    };
    let mut switches = shared.generation.subscribe();
    loop {
        let switched = match &listener {
            Some(l) => tokio::select! {
                accepted = l.accept() => {
                    if let Ok((socket, _)) = accepted {
                        tokio::spawn(connection(shared.clone(), socket));
                    }
                    false
                }
                changed = switches.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    true
                }
            },
            None => {
                if switches.changed().await.is_err() {
                    return;
                }
                true
            }
        };
        if !switched {
            continue;
        }
        let generation = *switches.borrow_and_update();
        if shared.rule().refuses() {
            listener = None;
        } else if listener.is_none() {
            listener = rebind(shared.addr).await;
        }
        let (lock, changed) = &shared.applied;
        *lock.lock().unwrap_or_else(PoisonError::into_inner) = generation;
        changed.notify_all();
    }
}

/// Binds the proxy's address again (SO_REUSEADDR is set by tokio), retrying briefly.
async fn rebind(addr: SocketAddr) -> Option<TcpListener> {
    for _ in 0..50 {
        match TcpListener::bind(addr).await {
            Ok(l) => return Some(l),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    eprintln!("fault proxy: cannot listen on {addr} again");
    None
}

/// Serves one client connection (after its TLS handshake, for a TLS proxy) until it ends or
/// the next switch.
async fn connection(shared: Arc<Shared>, client: TcpStream) {
    let mut switches = shared.generation.subscribe();
    switches.borrow_and_update();
    let served = async {
        match &shared.tls {
            Some(acceptor) => match acceptor.accept(client).await {
                Ok(tls) => serve(&shared, tls).await,
                Err(e) => Err(e),
            },
            None => serve(&shared, client).await,
        }
    };
    tokio::select! {
        _ = served => {}
        _ = switches.changed() => {}
    }
}

/// A spawned task aborted when dropped.
struct Pump(tokio::task::JoinHandle<()>);

impl Drop for Pump {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve<S>(shared: &Shared, client: S) -> std::io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (client_read, client_write) = tokio::io::split(client);
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let mut reader = Reader::new(client_read);
    let mut upstream: Option<(OwnedWriteHalf, Pump)> = None;
    loop {
        let Some(head) = reader.read_until(b"\r\n\r\n", 64 * 1024).await? else {
            return Ok(());
        };
        let request = Head::parse(&head)?;
        let fault = shared
            .rule
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&request.line);
        match fault {
            Fault::Pass => {
                shared.record(&request.method, &request.target, Verdict::Passed);
                if upstream.is_none() {
                    let socket = TcpStream::connect(shared.upstream).await?;
                    let (up_read, up_write) = socket.into_split();
                    let pump = Pump(tokio::spawn(pump(up_read, client_write.clone())));
                    upstream = Some((up_write, pump));
                }
                let Some((up_write, _)) = upstream.as_mut() else {
                    return Ok(());
                };
                up_write.write_all(&head).await?;
                match request.body {
                    Body::None => {}
                    Body::Length(n) => reader.copy_exact(n, up_write).await?,
                    Body::Chunked => reader.copy_chunked(up_write).await?,
                }
            }
            Fault::Status {
                status,
                retry_after,
                body,
            } => {
                shared.record(&request.method, &request.target, Verdict::Answered(status));
                // Read the request's body first: closing a socket with unread data resets the
                // connection, and the client would see the reset instead of the answer.
                let mut sink = tokio::io::sink();
                match request.body {
                    Body::None => {}
                    Body::Length(n) => reader.copy_exact(n, &mut sink).await?,
                    Body::Chunked => reader.copy_chunked(&mut sink).await?,
                }
                let response = render(status, retry_after, &body, request.method == "HEAD");
                let mut w = client_write.lock().await;
                w.write_all(response.as_bytes()).await?;
                w.shutdown().await?;
                return Ok(());
            }
            Fault::Stall => {
                shared.record(&request.method, &request.target, Verdict::Stalled);
                std::future::pending::<()>().await;
            }
            Fault::Drop | Fault::Refuse => {
                shared.record(&request.method, &request.target, Verdict::Dropped);
                return Ok(());
            }
        }
    }
}

/// Copies the part's responses to the client.
async fn pump<W: AsyncWrite + Unpin>(mut from: OwnedReadHalf, to: Arc<tokio::sync::Mutex<W>>) {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.lock().await.shutdown().await;
                return;
            }
            Ok(n) => {
                if to.lock().await.write_all(&buf[..n]).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A response of the proxy's own.
fn render(status: u16, retry_after: Option<u64>, body: &str, head_only: bool) -> String {
    let reason = match status {
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\nDocker-Distribution-API-Version: registry/2.0\r\n",
        body.len()
    );
    if let Some(secs) = retry_after {
        out.push_str(&format!("Retry-After: {secs}\r\n"));
    }
    out.push_str("\r\n");
    if !head_only {
        out.push_str(body);
    }
    out
}

/// How a request's body is framed.
#[derive(Debug, PartialEq, Eq)]
enum Body {
    None,
    Length(u64),
    Chunked,
}

/// The parts of a request head the proxy needs.
#[derive(Debug)]
struct Head {
    line: String,
    method: String,
    target: String,
    body: Body,
}

impl Head {
    /// Parses a request head (pure).
    fn parse(head: &[u8]) -> std::io::Result<Head> {
        let bad =
            |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
        let text = std::str::from_utf8(head).map_err(|_| bad("request head is not UTF-8"))?;
        let mut lines = text.split("\r\n");
        let line = lines.next().unwrap_or_default().to_string();
        let mut parts = line.split(' ');
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts
            .next()
            .ok_or_else(|| bad("no request target"))?
            .to_string();
        let mut body = Body::None;
        for header in lines {
            let Some((name, value)) = header.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
            {
                body = Body::Chunked;
            } else if name.eq_ignore_ascii_case("content-length") && body != Body::Chunked {
                body = Body::Length(value.parse().map_err(|_| bad("bad Content-Length"))?);
            }
        }
        Ok(Head {
            line,
            method,
            target,
            body,
        })
    }
}

/// Buffered reading of the client's side.
struct Reader<R> {
    inner: R,
    buf: Vec<u8>,
}

impl<R: AsyncRead + Unpin> Reader<R> {
    fn new(inner: R) -> Self {
        Self {
            inner,
            buf: Vec::new(),
        }
    }

    async fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.inner.read(&mut chunk).await?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Bytes up to and including `delim`; `None` at a clean end of stream.
    async fn read_until(&mut self, delim: &[u8], limit: usize) -> std::io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(pos) = self.buf.windows(delim.len()).position(|w| w == delim) {
                let rest = self.buf.split_off(pos + delim.len());
                return Ok(Some(std::mem::replace(&mut self.buf, rest)));
            }
            if self.buf.len() > limit {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "request head too long",
                ));
            }
            if self.fill().await? == 0 {
                return if self.buf.is_empty() {
                    Ok(None)
                } else {
                    Err(std::io::ErrorKind::UnexpectedEof.into())
                };
            }
        }
    }

    /// Forwards exactly `n` bytes.
    async fn copy_exact<W: tokio::io::AsyncWrite + Unpin>(
        &mut self,
        mut n: u64,
        out: &mut W,
    ) -> std::io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && self.fill().await? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            let take = usize::try_from(n).unwrap_or(usize::MAX).min(self.buf.len());
            out.write_all(&self.buf[..take]).await?;
            self.buf.drain(..take);
            n -= take as u64;
        }
        Ok(())
    }

    /// Forwards a chunked body, through the last chunk and the trailers.
    async fn copy_chunked<W: tokio::io::AsyncWrite + Unpin>(
        &mut self,
        out: &mut W,
    ) -> std::io::Result<()> {
        loop {
            let line = self
                .read_until(b"\r\n", 4096)
                .await?
                .ok_or(std::io::ErrorKind::UnexpectedEof)?;
            out.write_all(&line).await?;
            let size = chunk_size(&line)?;
            if size == 0 {
                // Trailers, up to an empty line.
                loop {
                    let trailer = self
                        .read_until(b"\r\n", 64 * 1024)
                        .await?
                        .ok_or(std::io::ErrorKind::UnexpectedEof)?;
                    out.write_all(&trailer).await?;
                    if trailer == b"\r\n" {
                        return Ok(());
                    }
                }
            }
            self.copy_exact(size + 2, out).await?;
        }
    }
}

/// The size of a chunk from its size line (`1a;ext\r\n`) (pure).
fn chunk_size(line: &[u8]) -> std::io::Result<u64> {
    let text = std::str::from_utf8(line).unwrap_or_default();
    let hex = text.trim_end().split(';').next().unwrap_or_default().trim();
    u64::from_str_radix(hex, 16).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("bad chunk size line {text:?}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_and_framing() {
        let h = Head::parse(b"GET /v2/x/tags/list HTTP/1.1\r\nHost: r\r\n\r\n").unwrap();
        assert_eq!(
            (h.method.as_str(), h.target.as_str()),
            ("GET", "/v2/x/tags/list")
        );
        assert_eq!(h.body, Body::None);
        let h = Head::parse(b"POST /r.git/git-upload-pack HTTP/1.1\r\ncontent-length: 12\r\n\r\n")
            .unwrap();
        assert_eq!(h.body, Body::Length(12));
        let h = Head::parse(
            b"POST /r.git/git-receive-pack HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.body, Body::Chunked);
        assert!(Head::parse(b"GET\r\n\r\n").is_err());
        assert_eq!(chunk_size(b"1a;x=y\r\n").unwrap(), 26);
        assert_eq!(chunk_size(b"0\r\n").unwrap(), 0);
        assert!(chunk_size(b"zz\r\n").is_err());
    }

    #[test]
    fn rules_limit_faults_to_matching_requests() {
        let rule = Rule {
            fault: Fault::Drop,
            matching: Some("git-receive-pack".into()),
            remaining: None,
        };
        assert_eq!(
            rule.fault_for("POST /r.git/git-receive-pack HTTP/1.1"),
            Fault::Drop
        );
        assert_eq!(
            rule.fault_for("POST /r.git/git-upload-pack HTTP/1.1"),
            Fault::Pass
        );
        let all = Rule {
            fault: Fault::unavailable("down"),
            matching: None,
            remaining: None,
        };
        assert!(matches!(
            all.fault_for("GET / HTTP/1.1"),
            Fault::Status { status: 503, .. }
        ));
        let mut twice = Rule {
            fault: Fault::Drop,
            matching: Some("/merge".into()),
            remaining: Some(2),
        };
        assert_eq!(twice.take("GET /pulls HTTP/1.1"), Fault::Pass);
        assert_eq!(twice.take("POST /pulls/1/merge HTTP/1.1"), Fault::Drop);
        assert_eq!(twice.take("POST /pulls/1/merge HTTP/1.1"), Fault::Drop);
        assert_eq!(twice.take("POST /pulls/1/merge HTTP/1.1"), Fault::Pass);
    }

    #[test]
    fn own_responses() {
        let r = render(429, Some(7), "{}", false);
        assert!(r.starts_with("HTTP/1.1 429 Too Many Requests\r\n"), "{r}");
        assert!(
            r.contains("Retry-After: 7\r\n") && r.ends_with("\r\n\r\n{}"),
            "{r}"
        );
        let r = render(503, None, "{}", true);
        assert!(
            r.contains("Content-Length: 2\r\n") && r.ends_with("\r\n\r\n"),
            "{r}"
        );
    }
}
