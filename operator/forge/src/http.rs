//! Requests to a forge: authentication headers, error mapping (including rate limits) and
//! pagination over `Link: <…>; rel="next"`.

use std::time::Duration;

use reqwest::{Method, header::HeaderMap};
use serde_json::Value;

use super::{ForgeClient, ForgeError, provider_name};
use imagewatch_crd::promotion::ForgeProvider;

/// Most pages followed in one listing (a policy's head branch has one open pull request;
/// this bounds a misbehaving server).
const MAX_PAGES: usize = 50;

/// Without a hint from the forge, wait this long after a rate limit.
const DEFAULT_RATE_LIMIT_WAIT: Duration = Duration::from_secs(60);

/// A successful answer.
pub(super) struct Answer {
    pub body: Value,
    pub headers: HeaderMap,
}

impl ForgeClient {
    pub(super) fn name(&self) -> &'static str {
        provider_name(self.provider)
    }

    pub(super) fn url(&self, path: &str) -> String {
        format!("{}{}", self.api, path)
    }

    /// Sends one request; non-2xx answers become [`ForgeError`]s.
    pub(super) async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ForgeError> {
        let result = self.call_inner(method, url, body).await;
        self.count(match &result {
            Ok(_) => "ok",
            Err(e) => e.category(),
        });
        result
    }

    async fn call_inner(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
    ) -> Result<Answer, ForgeError> {
        let mut request = self
            .http
            .request(method.clone(), url)
            .header(reqwest::header::ACCEPT, "application/json");
        request = match (self.provider, &self.token) {
            (ForgeProvider::Github, token) => {
                let r = request
                    .header(reqwest::header::ACCEPT, "application/vnd.github+json")
                    .header("X-GitHub-Api-Version", "2022-11-28");
                match token {
                    Some(t) => r.bearer_auth(t),
                    None => r,
                }
            }
            (ForgeProvider::Gitlab, Some(t)) => request.header("PRIVATE-TOKEN", t),
            (ForgeProvider::Gitea, Some(t)) => {
                request.header(reqwest::header::AUTHORIZATION, format!("token {t}"))
            }
            (_, None) => request,
        };
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| ForgeError::Transport {
            provider: self.name(),
            message: format!("{method} {url}: {}", error_chain(&e)),
        })?;
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.map_err(|e| ForgeError::Transport {
            provider: self.name(),
            message: format!("{method} {url}: reading the answer: {}", error_chain(&e)),
        })?;
        if status.is_success() {
            let body = if text.trim().is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).map_err(|e| ForgeError::Protocol {
                    provider: self.name(),
                    message: format!("{method} {url}: the answer is not JSON: {e}"),
                })?
            };
            return Ok(Answer { body, headers });
        }
        Err(self.error(status.as_u16(), &headers, &text, &method, url))
    }

    /// Maps a non-2xx answer.
    fn error(
        &self,
        status: u16,
        headers: &HeaderMap,
        text: &str,
        method: &Method,
        url: &str,
    ) -> ForgeError {
        let provider = self.name();
        let message = message_of(text);
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::trim)
                .map(str::to_string)
        };
        let exhausted = header("x-ratelimit-remaining").as_deref() == Some("0")
            || header("ratelimit-remaining").as_deref() == Some("0");
        let rate_limited = status == 429
            || (status == 403
                && (exhausted
                    || header("retry-after").is_some()
                    || message.to_ascii_lowercase().contains("rate limit")));
        if rate_limited {
            return ForgeError::RateLimited {
                provider,
                retry_after: Some(retry_after(headers).unwrap_or(DEFAULT_RATE_LIMIT_WAIT)),
                message,
            };
        }
        match status {
            401 | 403 => ForgeError::Unauthorized {
                provider,
                status,
                message,
            },
            404 => ForgeError::NotFound {
                provider,
                message: format!("{method} {url}: {message}"),
            },
            409 | 422 if message.to_ascii_lowercase().contains("already exist") => {
                ForgeError::AlreadyExists { provider, message }
            }
            s if s >= 500 => ForgeError::Server {
                provider,
                status,
                message,
            },
            _ => ForgeError::Rejected {
                provider,
                status,
                message,
            },
        }
    }

    /// Every item of a paginated list, following `Link: rel="next"` (at most [`MAX_PAGES`]).
    pub(super) async fn list_all(&self, first: String) -> Result<Vec<Value>, ForgeError> {
        let mut items = Vec::new();
        let mut next = Some(first);
        let mut pages = 0;
        while let Some(url) = next.take() {
            pages += 1;
            let answer = self.call(Method::GET, &url, None).await?;
            match answer.body {
                Value::Array(page) => items.extend(page),
                other => {
                    return Err(ForgeError::Protocol {
                        provider: self.name(),
                        message: format!("GET {url}: expected a list, got {}", kind_of(&other)),
                    });
                }
            }
            if pages >= MAX_PAGES {
                tracing::warn!(url, "stopped following pagination after {MAX_PAGES} pages");
                break;
            }
            next = answer
                .headers
                .get_all(reqwest::header::LINK)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .find_map(next_link);
        }
        Ok(items)
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The forge's explanation in an error body: `message` (GitHub, GitLab, Gitea) plus GitHub's
/// `errors[].message`; GitLab's `message` may be a list or an object of lists; `error` and
/// `error_description` (OAuth). Non-JSON bodies are cut to 300 characters.
pub fn message_of(text: &str) -> String {
    let Ok(json) = serde_json::from_str::<Value>(text) else {
        let trimmed = text.trim();
        return if trimmed.chars().count() > 300 {
            format!("{}…", trimmed.chars().take(300).collect::<String>())
        } else {
            trimmed.to_string()
        };
    };
    let mut parts: Vec<String> = Vec::new();
    let flatten = |v: &Value, parts: &mut Vec<String>| match v {
        Value::String(s) => parts.push(s.clone()),
        Value::Array(items) => parts.extend(items.iter().map(|i| match i {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })),
        Value::Object(map) => parts.extend(map.iter().map(|(k, v)| match v {
            Value::Array(items) => format!(
                    "{k} {}",
                    items
                        .iter()
                        .map(|i| i
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| i.to_string()))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            other => format!(
                    "{k} {}",
                    other
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| other.to_string())
                ),
        })),
        Value::Null => {}
        other => parts.push(other.to_string()),
    };
    if let Some(m) = json.get("message") {
        flatten(m, &mut parts);
    }
    if let Some(errors) = json.get("errors").and_then(Value::as_array) {
        for e in errors {
            match e.get("message").and_then(Value::as_str) {
                Some(m) => parts.push(m.to_string()),
                None => {
                    if let Some(s) = e.as_str() {
                        parts.push(s.to_string());
                    }
                }
            }
        }
    }
    for key in ["error", "error_description"] {
        if let Some(m) = json.get(key).and_then(Value::as_str) {
            parts.push(m.to_string());
        }
    }
    if parts.is_empty() {
        json.to_string()
    } else {
        parts.join(": ")
    }
}

/// How long a rate-limited client should wait: `retry-after` (seconds), else the reset time
/// (`x-ratelimit-reset` or `ratelimit-reset`, UTC epoch seconds) minus now.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return Some(Duration::from_secs(secs.max(1)));
    }
    let reset = header("x-ratelimit-reset")
        .or_else(|| header("ratelimit-reset"))
        .and_then(|v| v.parse::<i64>().ok())?;
    let now = jiff::Timestamp::now().as_second();
    Some(Duration::from_secs((reset - now).max(1) as u64))
}

/// The `rel="next"` URL of one `Link` header value.
pub fn next_link(header: &str) -> Option<String> {
    header.split(',').find_map(|part| {
        let mut pieces = part.split(';');
        let url = pieces.next()?.trim();
        let url = url.strip_prefix('<')?.strip_suffix('>')?;
        pieces
            .any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            })
            .then(|| url.to_string())
    })
}

/// Percent-encodes a path segment (GitLab's project path `group/app` → `group%2Fapp`).
pub fn encode_segment(segment: &str) -> String {
    let mut out = String::new();
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Percent-encodes a query value.
pub fn encode_query(value: &str) -> String {
    encode_segment(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        let h = "<https://api.github.com/repositories/1/pulls?page=2>; rel=\"next\", <https://api.github.com/repositories/1/pulls?page=5>; rel=\"last\"";
        assert_eq!(
            next_link(h).as_deref(),
            Some("https://api.github.com/repositories/1/pulls?page=2")
        );
        assert_eq!(next_link("<https://x/?page=1>; rel=\"prev\""), None);
    }

    #[test]
    fn messages() {
        assert_eq!(
            message_of(
                r#"{"message":"Validation Failed","errors":[{"resource":"PullRequest","code":"custom","message":"A pull request already exists for o:b."}]}"#
            ),
            "Validation Failed: A pull request already exists for o:b."
        );
        assert_eq!(
            message_of(
                r#"{"message":["Another open merge request already exists for this source branch: !7"]}"#
            ),
            "Another open merge request already exists for this source branch: !7"
        );
        assert_eq!(
            message_of(r#"{"message":{"title":["can't be blank"]}}"#),
            "title can't be blank"
        );
        assert_eq!(message_of("plain"), "plain");
    }

    #[test]
    fn retry_after_prefers_the_header() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        let mut h = HeaderMap::new();
        let reset = jiff::Timestamp::now().as_second() + 120;
        h.insert("x-ratelimit-reset", reset.to_string().parse().unwrap());
        let d = retry_after(&h).unwrap();
        assert!(
            d >= Duration::from_secs(118) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(retry_after(&HeaderMap::new()), None);
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(encode_segment("group/sub/app"), "group%2Fsub%2Fapp");
        assert_eq!(
            encode_query("o:imagewatch/promote-a"),
            "o%3Aimagewatch%2Fpromote-a"
        );
    }
}
