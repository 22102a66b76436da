//! Authentication of registry requests. A request goes out with what is known about its
//! registry (nothing, Basic, or a cached token); a 401 challenge is followed once, and bearer
//! tokens come from the shared caches of [`crate::auth`]: registry-wide tokens for
//! pulls, tokens of their own for other scopes, fetched from the token server the challenge
//! names.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};

use super::{Endpoint, MAX_TOKEN_BODY_BYTES, RegistryClient, read_body, read_failure};
use crate::auth::{
    AuthScheme, Challenge, Credentials, FetchedToken, TokenKey, parse_token_response,
    parse_www_authenticate, select_scheme,
};
use crate::error::RegistryError;
use crate::reference::RepositoryRef;
use crate::wide_tokens::{
    Issuer, RequestBudget, SharedToken, WideKey, WideOutcome, sensitive_header,
};

/// An `Authorization` value shorter than this fits every server's default header limits, so
/// a registry's 400 to it is not about its size.
const SMALL_AUTHORIZATION: usize = 4 * 1024;

/// What authenticated one request, remembered to decide how to react to a 401.
#[derive(Debug, Clone)]
enum SentAuth {
    Basic(String),
    /// A token for this request's scope alone.
    Bearer(String),
    /// A registry-wide token, and how many scopes it was requested for.
    Wide {
        token: SharedToken,
        scopes: usize,
    },
}

impl SentAuth {
    /// The `Authorization` header value (marked sensitive), or its text when it is not a
    /// valid header value.
    fn header(&self) -> Result<HeaderValue, String> {
        let text = match self {
            SentAuth::Basic(header) => header.clone(),
            SentAuth::Bearer(token) => format!("Bearer {token}"),
            SentAuth::Wide { token, .. } => {
                return token
                    .header()
                    .cloned()
                    .ok_or_else(|| format!("Bearer {}", token.text()));
            }
        };
        sensitive_header(&text).ok_or(text)
    }
}

impl RegistryClient {
    /// Announces repositories of `registry` that will be read with `creds`, so that the next
    /// registry-wide tokens cover them all (one token request per `repositoriesPerToken`
    /// repositories at start instead of one per group of repositories that happen to be
    /// scanned together).
    pub fn expect_repositories<'a>(
        &self,
        registry: &str,
        creds: &Credentials,
        paths: impl IntoIterator<Item = &'a str>,
    ) {
        let key = WideKey {
            registry: registry.to_string(),
            identity: creds.identity(),
        };
        for path in paths {
            self.inner.wide_tokens.remember(&key, &pull_scope(path));
        }
    }

    /// When the longest-lasting registry-wide token for `registry` and `creds` stops being
    /// handed out, if there is one.
    #[cfg(test)]
    pub fn wide_token_usable_until(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Option<tokio::time::Instant> {
        self.inner.wide_tokens.usable_until(&WideKey {
            registry: registry.to_string(),
            identity: creds.identity(),
        })
    }

    /// Sends one registry request, authenticating as the registry asks.
    ///
    /// The first request goes out with whatever is known about the registry (nothing,
    /// Basic, or a cached token); after a 401, one more with the scheme the challenge names,
    /// and a second 401 is final. Two cases add a request: a registry-wide token refused
    /// with `insufficient_scope` is followed by the repository's own token (once), and a
    /// wide token refused as too large a header is followed by one for fewer repositories.
    /// Other responses are returned as they are.
    pub(crate) async fn send(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
        method: Method,
        url: &Url,
        accept: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let scope = pull_scope(&repo.path);
        self.send_scoped(repo, &scope, creds, method, url, accept)
            .await
    }

    /// [`Self::send`] with an explicit token scope (the catalog needs `registry:catalog:*`).
    /// Pull scopes use registry-wide tokens; other scopes get tokens of their own.
    pub(super) async fn send_scoped(
        &self,
        repo: &RepositoryRef,
        scope: &str,
        creds: &Credentials,
        method: Method,
        url: &Url,
        accept: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let wide = is_pull_scope(scope);
        let remembered = self.remembered_scheme(&repo.registry);
        if wide && !matches!(remembered, Some(AuthScheme::Basic)) {
            // Before any waiting (rate limit, challenge, token fetch): a wide token fetched
            // meanwhile for another repository then covers this one too.
            self.inner
                .wide_tokens
                .remember(&wide_key(repo, creds), scope);
        }
        // The token server that issued the current token.
        let mut issuer: Option<(String, Option<String>)> = None;
        let mut auth = match remembered {
            Some(AuthScheme::Basic) => creds.basic_header().map(SentAuth::Basic),
            Some(AuthScheme::Bearer { realm, service }) => {
                let token = self
                    .bearer_token(repo, scope, wide, creds, &realm, service.as_deref(), None)
                    .await?;
                issuer = Some((realm, service));
                Some(token)
            }
            None => None,
        };

        let mut challenged = false;
        let mut own_token_fallback = false;
        // Each shrink at least halves the scopes of the wide token; this only bounds the loop.
        let mut shrinks_left = usize::BITS;
        loop {
            let http = self.http_for(&repo.registry);
            // Built once per credential, not per attempt: a registry-wide token can be
            // hundreds of kilobytes, and a cloned header value shares its bytes.
            let header = auth.as_ref().map(SentAuth::header);
            let response = self
                .execute(&repo.registry, || {
                    let request = http
                        .request(method.clone(), url.clone())
                        .header(ACCEPT, accept);
                    match &header {
                        Some(Ok(value)) => request.header(AUTHORIZATION, value.clone()),
                        // Not a valid header: the request fails as it would with the text.
                        Some(Err(text)) => request.header(AUTHORIZATION, text.as_str()),
                        None => request,
                    }
                })
                .await?;

            if let (Some(SentAuth::Wide { token, scopes }), Some((realm, service))) =
                (&auth, &issuer)
                && *scopes > 1
                && token.text().len() >= SMALL_AUTHORIZATION
                && shrinks_left > 0
                && head_too_large(&response)
            {
                shrinks_left -= 1;
                tracing::debug!(
                    registry = %repo.registry,
                    scopes,
                    token_bytes = token.text().len(),
                    "registry refused a registry-wide token as too large; asking for fewer repositories per token"
                );
                self.inner
                    .wide_tokens
                    .lower_scope_limit(&repo.registry, scopes / 2);
                auth = Some(
                    self.bearer_token(
                        repo,
                        scope,
                        wide,
                        creds,
                        realm,
                        service.as_deref(),
                        auth.as_ref(),
                    )
                    .await?,
                );
                continue;
            }
            if response.status() != StatusCode::UNAUTHORIZED {
                return Ok(response);
            }

            let challenges: Vec<_> = response
                .headers()
                .get_all(WWW_AUTHENTICATE)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .flat_map(parse_www_authenticate)
                .collect();
            if let (Some(SentAuth::Wide { .. }), Some((realm, service))) = (&auth, &issuer)
                && !own_token_fallback
                && is_insufficient_scope(&challenges)
            {
                // The token server granted fewer repositories than asked for.
                own_token_fallback = true;
                tracing::debug!(%repo, "registry-wide token does not cover this repository; using its own token");
                self.inner
                    .wide_tokens
                    .use_own_token(&wide_key(repo, creds), scope);
                auth = Some(
                    self.bearer_token(repo, scope, wide, creds, realm, service.as_deref(), None)
                        .await?,
                );
                continue;
            }
            if challenged {
                if matches!(auth, Some(SentAuth::Wide { .. })) {
                    // Even a wide token fetched after the challenge was refused: this
                    // repository gets its own token from the next request on.
                    self.inner
                        .wide_tokens
                        .use_own_token(&wide_key(repo, creds), scope);
                }
                return Ok(response);
            }
            challenged = true;

            let Some(scheme) = select_scheme(&challenges) else {
                // 401 with nothing to follow: report it as it is.
                return Ok(response);
            };
            self.remember_scheme(&repo.registry, &scheme);
            auth = match scheme {
                AuthScheme::Basic => match (creds.basic_header(), &auth) {
                    // Already sent these credentials, or there are none to send.
                    (Some(_), Some(SentAuth::Basic(_))) | (None, _) => return Ok(response),
                    (Some(header), _) => Some(SentAuth::Basic(header)),
                },
                AuthScheme::Bearer { realm, service } => {
                    let token = self
                        .bearer_token(
                            repo,
                            scope,
                            wide,
                            creds,
                            &realm,
                            service.as_deref(),
                            auth.as_ref(),
                        )
                        .await?;
                    issuer = Some((realm, service));
                    Some(token)
                }
            };
        }
    }

    /// A token for `scope`: a registry-wide one when `wide` (a pull scope) and the
    /// repository may use it, else one of its own. `rejected` is the authentication the
    /// registry just refused, if any: a cached token equal to it is replaced once.
    #[allow(clippy::too_many_arguments)]
    async fn bearer_token(
        &self,
        repo: &RepositoryRef,
        scope: &str,
        wide: bool,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
        rejected: Option<&SentAuth>,
    ) -> Result<SentAuth, RegistryError> {
        if wide {
            let key = wide_key(repo, creds);
            if !self.inner.wide_tokens.needs_own_token(&key, scope) {
                let issuer = Issuer {
                    realm: realm.to_string(),
                    service: service.map(str::to_string),
                };
                let url_len = token_url::<&str>(&repo.registry, realm, service, &[])?
                    .as_str()
                    .len();
                let budget = || {
                    if self.posts_token_form(creds, realm) {
                        RequestBudget {
                            base_len: 0,
                            max_len: TOKEN_FORM_BUDGET,
                        }
                    } else {
                        RequestBudget {
                            base_len: url_len,
                            max_len: self.inner.wide_tokens.url_budget(),
                        }
                    }
                };
                let rejected = match rejected {
                    Some(SentAuth::Wide { token, .. }) => Some(token.text()),
                    _ => None,
                };
                let outcome = self
                    .inner
                    .wide_tokens
                    .get_or_fetch(&key, &issuer, scope, rejected, budget, |scopes| {
                        self.fetch_token(repo, scopes, creds, realm, service)
                    })
                    .await?;
                if let WideOutcome::Token { token, scopes } = outcome {
                    return Ok(SentAuth::Wide { token, scopes });
                }
            }
        }
        let key = TokenKey {
            registry: repo.registry.clone(),
            scope: scope.to_string(),
            identity: creds.identity(),
        };
        let rejected = match rejected {
            Some(SentAuth::Bearer(token)) => Some(token.as_str()),
            _ => None,
        };
        let token = self
            .inner
            .tokens
            .get_or_fetch(&key, rejected, || {
                self.fetch_token(repo, vec![scope.to_string()], creds, realm, service)
            })
            .await?;
        Ok(SentAuth::Bearer(token))
    }

    /// Asks the token server named by a Bearer challenge for a token covering `scopes`,
    /// counting the outcome.
    async fn fetch_token(
        &self,
        repo: &RepositoryRef,
        scopes: Vec<String>,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
    ) -> Result<FetchedToken, RegistryError> {
        let result = self
            .request_token(repo, scopes, creds, realm, service)
            .await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.category(),
        };
        let mut outcomes = self
            .inner
            .token_outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *outcomes.entry(outcome).or_default() += 1;
        result
    }

    /// One token request (see [`Self::fetch_token`]): with a username and password, first
    /// the OAuth2 form `POST` to the realm (any number of scopes in its body); a token server
    /// that refuses it (see [`form_refused`]) or answers it without a `scope` field is asked
    /// with `GET` from then on, for [`FORM_RETRY_PERIOD`]. Without credentials, `GET`.
    async fn request_token(
        &self,
        repo: &RepositoryRef,
        scopes: Vec<String>,
        creds: &Credentials,
        realm: &str,
        service: Option<&str>,
    ) -> Result<FetchedToken, RegistryError> {
        let url = token_url(&repo.registry, realm, service, &scopes)?;
        if url.scheme() == "http" {
            // The realm comes from the network; never let it pull a password onto a
            // plain-text connection unless the user marked that host as insecure.
            let host = url_authority(&url);
            if creds.basic_header().is_some() && self.scheme_for(&host) != "http" {
                return Err(RegistryError::Protocol(format!(
                    "registry {} sent token realm {realm} over plain HTTP; refusing to send credentials there (add {host} to the insecure hosts if intended)",
                    repo.registry
                )));
            }
        }

        self.inner.token_fetches.fetch_add(1, Ordering::Relaxed);
        // The token server may share the registry's private CA (same host, or a host of its
        // own with settings); its requests count against the registry's rate limit.
        let http = self
            .inner
            .tls_clients
            .get(&url_authority(&url))
            .unwrap_or_else(|| self.http_for(&repo.registry));

        // A form refused with 401 or 403 may be a server that wants the credentials in a
        // header (then the GET works) or wrong credentials (then it fails too, and the form
        // stays in use): decided by the GET.
        let mut refused_unless_get_fails = None;
        if let Credentials::Basic { username, password } = creds
            && self.posts_token_form(creds, realm)
        {
            tracing::debug!(
                registry = %repo.registry,
                scopes = scopes.len(),
                first_scope = scopes.first().map(String::as_str).unwrap_or_default(),
                "fetching registry token (OAuth2 form)"
            );
            let form = token_form(service, username, password, &scopes);
            let realm_url = token_url::<&str>(&repo.registry, realm, None, &[])?;
            let response = self
                .execute(&repo.registry, || {
                    http.post(realm_url.clone())
                        .header(ACCEPT, "application/json")
                        .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                        .body(form.clone())
                })
                .await?;
            let status = response.status();
            if status.is_success() {
                let body = read_body(response, MAX_TOKEN_BODY_BYTES).await?;
                if form_answer_has_scope(&body) {
                    return parse_token_response(&body);
                }
                self.refuse_token_form(realm, "its answer has no scope field");
            } else if !form_refused(status) {
                return Err(read_failure(response)
                    .await
                    .into_error(repo, Endpoint::TokenServer));
            } else if matches!(status.as_u16(), 401 | 403) {
                refused_unless_get_fails = Some(status);
            } else {
                self.refuse_token_form(realm, status.as_str());
            }
            if scopes.len() > 1 && url.as_str().len() > self.inner.wide_tokens.url_budget() {
                // Too many scopes for a URL: the caller plans again for `GET`.
                if let Some(status) = refused_unless_get_fails {
                    self.refuse_token_form(realm, status.as_str());
                }
                return Err(RegistryError::Server {
                    registry: repo.registry.clone(),
                    status: StatusCode::URI_TOO_LONG.as_u16(),
                    message: format!(
                        "token server {realm} takes no OAuth2 form and {} scopes do not fit one URL",
                        scopes.len()
                    ),
                });
            }
        }

        tracing::debug!(
            registry = %repo.registry,
            scopes = scopes.len(),
            first_scope = scopes.first().map(String::as_str).unwrap_or_default(),
            "fetching registry token"
        );
        let basic = creds.basic_header();
        let response = self
            .execute(&repo.registry, || {
                let request = http.get(url.clone()).header(ACCEPT, "application/json");
                match &basic {
                    Some(header) => request.header(AUTHORIZATION, header),
                    None => request,
                }
            })
            .await?;
        if !response.status().is_success() {
            return Err(read_failure(response)
                .await
                .into_error(repo, Endpoint::TokenServer));
        }
        if let Some(status) = refused_unless_get_fails {
            self.refuse_token_form(realm, status.as_str());
        }
        let body = read_body(response, MAX_TOKEN_BODY_BYTES).await?;
        parse_token_response(&body)
    }

    /// Whether a token request for `creds` at `realm` is the OAuth2 form `POST`: there is a
    /// username and password, and the realm has not refused the form lately.
    fn posts_token_form(&self, creds: &Credentials, realm: &str) -> bool {
        if !matches!(creds, Credentials::Basic { .. }) {
            return false;
        }
        let mut refused = self
            .inner
            .token_forms_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match refused.get(realm) {
            Some(until) if *until > Instant::now() => false,
            Some(_) => {
                refused.remove(realm);
                true
            }
            None => true,
        }
    }

    /// Makes token requests to `realm` use `GET` for [`FORM_RETRY_PERIOD`].
    fn refuse_token_form(&self, realm: &str, why: &str) {
        tracing::debug!(
            realm,
            why,
            "token server does not take the OAuth2 form; asking it with GET"
        );
        self.inner
            .token_forms_refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(realm.to_string(), Instant::now() + FORM_RETRY_PERIOD);
    }
}

/// Most bytes of the scopes of one OAuth2 form token request (counted as they would be in a
/// URL, which is more than the form needs). A body has no practical limit at the servers;
/// what this bounds is the token, which grows with every scope it grants and goes with
/// every registry request.
pub const TOKEN_FORM_BUDGET: usize = 1024 * 1024;

/// How long a token server that refused the OAuth2 form is asked with `GET` only, before the
/// form is tried again (the server may have been upgraded).
pub const FORM_RETRY_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The client id sent in OAuth2 form token requests (the spec asks for one to identify the
/// client; it is not a secret).
const OAUTH_CLIENT_ID: &str = "imagewatch";

/// The body of an OAuth2 form token request (distribution's "OAuth2 Token Authentication"):
/// `grant_type=password` with the username and password, the service, a client id and the
/// scopes, space-separated in one `scope` field.
fn token_form(service: Option<&str>, username: &str, password: &str, scopes: &[String]) -> String {
    let mut form = form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "password");
    if let Some(service) = service {
        form.append_pair("service", service);
    }
    form.append_pair("client_id", OAUTH_CLIENT_ID);
    form.append_pair("username", username);
    form.append_pair("password", password);
    if !scopes.is_empty() {
        form.append_pair("scope", &scopes.join(" "));
    }
    form.finish()
}

/// Whether the answer to a form `POST` says the server does not take it, so that `GET` is the
/// way to ask: 404 (what the spec names) and 405 for a realm without `POST`, 400, 401, 403
/// and 415 for one that handles `POST` like `GET` (no scopes in the query, credentials in no
/// header), 501. Rate limits (429) and server errors are errors of the request.
fn form_refused(status: StatusCode) -> bool {
    matches!(status.as_u16(), 400 | 401 | 403 | 404 | 405 | 415 | 501)
}

/// Whether a successful answer to a form `POST` is an OAuth2 token response: the spec makes
/// its `scope` field required. A server that answers `POST` as it answers `GET` (reading
/// scopes from the query, of which there are none) leaves it out.
fn form_answer_has_scope(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Answer {
        scope: Option<String>,
    }
    serde_json::from_slice::<Answer>(body).is_ok_and(|a| a.scope.is_some())
}

/// The token request URL for a Bearer challenge: the realm with `service` (when the challenge
/// named one) and one `scope` parameter per scope added to its query, as the Docker token
/// spec describes.
pub fn token_url<S: AsRef<str>>(
    registry: &str,
    realm: &str,
    service: Option<&str>,
    scopes: &[S],
) -> Result<Url, RegistryError> {
    let mut url = Url::parse(realm).map_err(|e| {
        RegistryError::Protocol(format!(
            "registry {registry} named an invalid token realm {realm:?}: {e}"
        ))
    })?;
    if !matches!(url.scheme(), "https" | "http") {
        return Err(RegistryError::Protocol(format!(
            "registry {registry} named a token realm with unsupported scheme {:?}",
            url.scheme()
        )));
    }
    {
        let mut query = url.query_pairs_mut();
        if let Some(service) = service {
            query.append_pair("service", service);
        }
        for scope in scopes {
            query.append_pair("scope", scope.as_ref());
        }
    }
    Ok(url)
}

/// The token scope for pulling from the repository at `path`.
fn pull_scope(path: &str) -> String {
    format!("repository:{path}:pull")
}

/// Whether `scope` is pull access to one repository, which registry-wide tokens cover.
fn is_pull_scope(scope: &str) -> bool {
    scope.starts_with("repository:") && scope.ends_with(":pull") && !scope.contains(',')
}

fn wide_key(repo: &RepositoryRef, creds: &Credentials) -> WideKey {
    WideKey {
        registry: repo.registry.clone(),
        identity: creds.identity(),
    }
}

/// Whether a 401 says the token lacks access to the resource (`error="insufficient_scope"`,
/// RFC 6750 §3.1), as opposed to the token being invalid.
fn is_insufficient_scope(challenges: &[Challenge]) -> bool {
    challenges
        .iter()
        .any(|c| c.scheme == "bearer" && c.param("error") == Some("insufficient_scope"))
}

/// Whether a registry refused a request because its head was too large: 431, or the 400 that
/// nginx answers to an oversized header line, an HTML page where registries send JSON.
fn head_too_large(response: &reqwest::Response) -> bool {
    match response.status() {
        StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE => true,
        StatusCode::BAD_REQUEST => !response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("json")),
        _ => false,
    }
}

/// `host[:port]` of a URL, with the port only when it is explicit, matching how insecure
/// hosts are written.
fn url_authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::CATALOG_SCOPE;
    use super::*;

    #[test]
    fn token_urls_with_several_scopes() {
        let scopes = [
            "repository:team/app:pull",
            "repository:library/nginx:pull",
            "repository:a.b/c_d-e:pull",
        ];
        let base = token_url::<&str>("r.io", "https://auth.r.io/token", Some("r.io"), &[])
            .unwrap()
            .as_str()
            .len();
        let url = token_url("r.io", "https://auth.r.io/token", Some("r.io"), &scopes).unwrap();
        assert_eq!(
            url.as_str(),
            "https://auth.r.io/token?service=r.io&scope=repository%3Ateam%2Fapp%3Apull&scope=repository%3Alibrary%2Fnginx%3Apull&scope=repository%3Aa.b%2Fc_d-e%3Apull"
        );
        // The budget arithmetic of wide tokens matches the URL that is sent.
        let expected: usize = base
            + scopes
                .iter()
                .map(|s| crate::wide_tokens::scope_param_len(s))
                .sum::<usize>();
        assert_eq!(url.as_str().len(), expected);
        assert!(is_pull_scope(scopes[0]));
        assert!(!is_pull_scope(CATALOG_SCOPE));
        assert!(!is_pull_scope("repository:a:pull,push"));
    }

    #[test]
    fn oauth2_form_bodies_and_answers() {
        let scopes = vec![
            "repository:team/app:pull".to_string(),
            "repository:a.b/c_d-e:pull".to_string(),
        ];
        let body = token_form(Some("r.io"), "me@x", "p&ss word", &scopes);
        assert_eq!(
            body,
            "grant_type=password&service=r.io&client_id=imagewatch&username=me%40x&password=p%26ss+word&scope=repository%3Ateam%2Fapp%3Apull+repository%3Aa.b%2Fc_d-e%3Apull"
        );
        let fields: Vec<(String, String)> = form_urlencoded::parse(body.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        assert_eq!(fields[4].1, "p&ss word");
        assert_eq!(fields[5].1, scopes.join(" "));
        // The budget of a URL overestimates the form: the same scopes take fewer bytes.
        let url_cost: usize = scopes
            .iter()
            .map(|s| crate::wide_tokens::scope_param_len(s))
            .sum();
        let form_cost = body.len() - token_form(Some("r.io"), "me@x", "p&ss word", &[]).len();
        assert!(form_cost <= url_cost, "{form_cost} > {url_cost}");

        // Refusals that mean "ask with GET"; rate limits and server errors do not.
        for status in [400, 401, 403, 404, 405, 415, 501] {
            assert!(
                form_refused(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
        for status in [429, 500, 502, 503] {
            assert!(
                !form_refused(StatusCode::from_u16(status).unwrap()),
                "{status}"
            );
        }
        // An OAuth2 answer names its scope; a GET-style answer to a POST does not.
        assert!(form_answer_has_scope(
            br#"{"access_token":"t","scope":"repository:a:pull","expires_in":300}"#
        ));
        assert!(!form_answer_has_scope(br#"{"token":"t","expires_in":300}"#));
        assert!(!form_answer_has_scope(b"<html>not json</html>"));
    }
}
