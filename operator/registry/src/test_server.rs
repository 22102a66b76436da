//! Test support for the scan step: a minimal HTTP/1.1 server on 127.0.0.1 that plays a
//! registry and its token server, so authentication, caching and pagination can be tested
//! without a network or a real registry.
//!
//! One request per connection (`Connection: close`), with the body `Content-Length` says:
//! enough for the GET/HEAD traffic of the registry client and the form `POST`s of its token
//! requests. A request head above [`MAX_HEAD_BYTES`] is
//! answered with 431, as Go's and hyper's servers do beyond their limits. Every request is
//! logged, so tests can count what reached the server (token fetches, retries). Variants: a
//! server that accepts and never answers (timeouts), and a TLS front with a test CA made by
//! `openssl`.

use std::io::{Read as _, Write as _};
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct TestRequest {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
    /// The body, as long as `Content-Length` says (empty without it).
    pub body: Vec<u8>,
}

impl TestRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }

    /// Value of a query parameter (no percent-decoding beyond `%3A` and `%2F`, which is all
    /// the scopes in these tests need).
    pub fn query(&self, name: &str) -> Option<String> {
        self.query_all(name).into_iter().next()
    }

    /// Value of a field of an `application/x-www-form-urlencoded` body.
    pub fn form(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(&self.body)
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// Every value of a repeated query parameter, in order (decoded as [`Self::query`]).
    pub fn query_all(&self, name: &str) -> Vec<String> {
        let Some((_, query)) = self.target.split_once('?') else {
            return Vec::new();
        };
        query
            .split('&')
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                (k == name).then(|| v.replace("%3A", ":").replace("%2F", "/"))
            })
            .collect()
    }
}

#[derive(Debug, Clone)]
pub struct TestResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl TestResponse {
    pub fn new(status: u16) -> Self {
        TestResponse {
            status,
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn json(mut self, body: &str) -> Self {
        self.body = body.as_bytes().to_vec();
        self.header("Content-Type", "application/json")
    }
}

/// Largest request head served.
pub const MAX_HEAD_BYTES: usize = 256 * 1024;

type Handler = Arc<dyn Fn(TestRequest) -> BoxFuture<'static, TestResponse> + Send + Sync>;

type RequestLog = Arc<Mutex<Vec<TestRequest>>>;

/// Serves until dropped.
pub struct TestServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
    log: RequestLog,
    connections: Arc<AtomicUsize>,
}

impl TestServer {
    pub async fn start<F>(handler: F) -> TestServer
    where
        F: Fn(TestRequest) -> BoxFuture<'static, TestResponse> + Send + Sync + 'static,
    {
        Self::spawn(Some(Arc::new(handler))).await
    }

    /// Accepts connections and reads requests but never answers, holding the connections
    /// open until dropped: every request to it times out.
    pub async fn silent() -> TestServer {
        Self::spawn(None).await
    }

    async fn spawn(handler: Option<Handler>) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let log = RequestLog::default();
        let connections = Arc::new(AtomicUsize::new(0));
        let (task_log, task_connections) = (log.clone(), connections.clone());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((stream, _)) = listener.accept().await {
                task_connections.fetch_add(1, Ordering::SeqCst);
                match &handler {
                    Some(handler) => {
                        tokio::spawn(serve(stream, handler.clone(), task_log.clone()));
                    }
                    // Aborting the accept task drops these, closing the connections.
                    None => held.push(stream),
                }
            }
        });
        TestServer {
            addr,
            task,
            log,
            connections,
        }
    }

    /// `127.0.0.1:PORT`, the registry host to use in references.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Requests received so far.
    pub fn requests(&self) -> Vec<TestRequest> {
        self.log.lock().unwrap().clone()
    }

    /// Requests received so far whose path is `path`.
    pub fn count(&self, path: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path() == path)
            .count()
    }

    /// Connections accepted so far (for the silent server, the requests sent to it).
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, handler: Handler, log: RequestLog) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > MAX_HEAD_BYTES {
            let _ = stream
                .write_all(b"HTTP/1.1 431 X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                .await;
            let _ = stream.shutdown().await;
            return;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let target = first.next().unwrap_or("").to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let is_head = method == "HEAD";
    let mut request = TestRequest {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf.split_off(head_end + 4);
    while body.len() < length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    body.truncate(length);
    request.body = body;
    log.lock().unwrap().push(request.clone());
    let response = handler(request).await;

    let mut out = format!("HTTP/1.1 {} X\r\n", response.status);
    for (k, v) in &response.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        response.body.len()
    ));
    let mut bytes = out.into_bytes();
    if !is_head {
        bytes.extend_from_slice(&response.body);
    }
    let _ = stream.write_all(&bytes).await;
    let _ = stream.shutdown().await;
}

/// A CA and a server certificate signed by it, made with the `openssl` command.
pub struct TestCertificates {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

impl TestCertificates {
    /// Certificates for `names` (DNS names; `127.0.0.1` is always included). Panics, naming
    /// it, when `openssl` cannot be run: the test tier installs it.
    pub fn generate(dir: &Path, names: &[&str]) -> TestCertificates {
        let run = |args: &[&str]| {
            let output = Command::new("openssl")
                .args(args)
                .current_dir(dir)
                .output()
                .unwrap_or_else(|e| panic!("cannot run openssl (needed for the TLS tests): {e}"));
            assert!(
                output.status.success(),
                "openssl {args:?} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        };
        let mut san = String::from("subjectAltName=IP:127.0.0.1");
        for name in names {
            san.push_str(&format!(",DNS:{name}"));
        }
        std::fs::write(
            dir.join("server.ext"),
            format!(
                "{san}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
            ),
        )
        .unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
        ];
        run(&[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=imagewatch test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat());
        run(&[
            &["req"][..],
            &ec,
            &[
                "-keyout",
                "server.key",
                "-out",
                "server.csr",
                "-subj",
                "/CN=imagewatch test server",
            ],
        ]
        .concat());
        run(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            "server.pem",
            "-extfile",
            "server.ext",
        ]);
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
        TestCertificates {
            ca_pem: read("ca.pem"),
            server_cert_pem: read("server.pem"),
            server_key_pem: read("server.key"),
        }
    }
}

/// A TLS front for a [`TestServer`]: terminates TLS with the given certificate and relays
/// each request to the plain server. Runs on its own threads with blocking I/O (the crate
/// has rustls but no async TLS adapter); stops when dropped.
pub struct TlsFront {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
}

impl TlsFront {
    pub fn start(backend: SocketAddr, certs: &TestCertificates) -> TlsFront {
        use rustls::pki_types::pem::PemObject as _;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let chain = CertificateDer::pem_slice_iter(certs.server_cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_slice(certs.server_key_pem.as_bytes()).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder()
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let config = config.clone();
                std::thread::spawn(move || relay(stream, backend, config));
            }
        });
        TlsFront { addr, stop }
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = std::net::TcpStream::connect(self.addr);
    }
}

fn relay(stream: std::net::TcpStream, backend: SocketAddr, config: Arc<rustls::ServerConfig>) {
    let timeout = Some(std::time::Duration::from_secs(10));
    let _ = stream.set_read_timeout(timeout);
    let Ok(connection) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut tls = rustls::StreamOwned::new(connection, stream);
    let mut head = Vec::new();
    let mut chunk = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let Ok(mut plain) = std::net::TcpStream::connect(backend) else {
        return;
    };
    let _ = plain.set_read_timeout(timeout);
    let mut response = Vec::new();
    if plain.write_all(&head).is_err() || plain.read_to_end(&mut response).is_err() {
        return;
    }
    let _ = tls.write_all(&response);
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// Holds a fake registry's 401 answers until `n` requests needing one have arrived (once
/// per [`ChallengeTogether::expect`]). No caller learns how to get a token before every
/// caller of the burst is in flight without one, so "one token request for the burst" is
/// tested with the callers overlapping by construction, not by a sleep in the token server.
///
/// Each caller of a fresh client sends its first request unauthenticated (the scheme is
/// remembered only from a 401, and none is answered before the `n`-th arrives), so a burst
/// of `n` callers always opens the gate.
#[derive(Debug, Default)]
pub struct ChallengeTogether(Mutex<Option<(usize, tokio::sync::watch::Sender<bool>)>>);

impl ChallengeTogether {
    /// The next `n` requests to be challenged wait for each other.
    pub fn expect(&self, n: usize) {
        let (open, _) = tokio::sync::watch::channel(false);
        *self.0.lock().unwrap() = Some((n, open));
    }

    /// Waits, when a burst is expected, until all of its requests have arrived.
    pub async fn arrive(&self) {
        let mut opened = {
            let mut gate = self.0.lock().unwrap();
            let Some((left, open)) = gate.as_mut() else {
                return;
            };
            let opened = open.subscribe();
            *left = left.saturating_sub(1);
            if *left == 0 {
                open.send_replace(true);
                *gate = None;
            }
            opened
        };
        opened
            .wait_for(|open| *open)
            .await
            .expect("the gate opens before it is dropped");
    }
}
