//! Test support for the scan step: a minimal HTTP/1.1 server on 127.0.0.1 that plays a
//! registry and its token server, so authentication, caching and pagination can be tested
//! without a network or a real registry.
//!
//! One request per connection (`Connection: close`), no request bodies: enough for the
//! GET/HEAD traffic of the registry client.

use std::net::SocketAddr;
use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub(crate) struct TestRequest {
    pub method: String,
    /// Path and query, as sent.
    pub target: String,
    pub headers: Vec<(String, String)>,
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
        let (_, query) = self.target.split_once('?')?;
        query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            (k == name).then(|| v.replace("%3A", ":").replace("%2F", "/"))
        })
    }
}

#[derive(Debug, Clone)]
pub(crate) struct TestResponse {
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

type Handler = Arc<dyn Fn(TestRequest) -> BoxFuture<'static, TestResponse> + Send + Sync>;

/// Serves until dropped.
pub(crate) struct TestServer {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl TestServer {
    pub async fn start<F>(handler: F) -> TestServer
    where
        F: Fn(TestRequest) -> BoxFuture<'static, TestResponse> + Send + Sync + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler: Handler = Arc::new(handler);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, handler.clone()));
            }
        });
        TestServer { addr, task }
    }

    /// `127.0.0.1:PORT`, the registry host to use in references.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut stream: TcpStream, handler: Handler) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break pos;
        }
        if buf.len() > 64 * 1024 {
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
    let response = handler(TestRequest {
        method,
        target,
        headers,
    })
    .await;

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
