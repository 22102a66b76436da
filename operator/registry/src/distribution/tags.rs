//! Listing: a repository's tags (`GET /v2/<name>/tags/list`) and a registry's repositories
//! (`GET /v2/_catalog`), following `Link` pagination within bounds on pages and bytes; and
//! the client's [`TagSource`] implementation.

use std::collections::HashSet;
use std::future::Future;

use futures::future::BoxFuture;
use reqwest::header::{HeaderMap, LINK};
use reqwest::{Method, StatusCode, Url};

use super::{CATALOG_PATH, CATALOG_SCOPE, Endpoint, RegistryClient, read_body, read_failure};
use crate::auth::Credentials;
use crate::error::RegistryError;
use crate::reference::{RepositoryRef, is_valid_tag};
use crate::source::TagSource;
use imagewatch_engine::policy::TagInfo;

/// One page of tags. Even 100 000 tags of 128 characters fit; a larger answer is broken.
const MAX_TAGS_PAGE_BYTES: usize = 32 * 1024 * 1024;

impl RegistryClient {
    /// Lists all tags of `repo`, following pagination. Tags that do not match the tag
    /// grammar are dropped, since a chosen tag is later written into manifests.
    pub async fn list_tags(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
    ) -> Result<Vec<String>, RegistryError> {
        Ok(self.list_tags_paged(repo, creds).await?.0)
    }

    /// [`Self::list_tags`], also returning how many pages were read.
    pub async fn list_tags_paged(
        &self,
        repo: &RepositoryRef,
        creds: &Credentials,
    ) -> Result<(Vec<String>, usize), RegistryError> {
        #[derive(serde::Deserialize)]
        struct Page {
            // Some registries send `null` for a repository without tags.
            tags: Option<Vec<String>>,
        }

        let base = self.repo_url(repo, "tags/list")?;
        let mut seen_tags = HashSet::new();
        let mut tags = Vec::new();
        let mut dropped = 0usize;
        let pages = self
            .read_pages(
                base,
                Listing {
                    subject: &repo.to_string(),
                    what: "tag list",
                    target: repo,
                },
                |url| async move {
                    self.send(repo, creds, Method::GET, &url, "application/json")
                        .await
                },
                |page: Page| {
                    for tag in page.tags.unwrap_or_default() {
                        if !is_valid_tag(&tag) {
                            dropped += 1;
                        } else if seen_tags.insert(tag.clone()) {
                            tags.push(tag);
                        }
                    }
                },
            )
            .await?;
        if dropped > 0 {
            tracing::warn!(%repo, dropped, "registry listed tags that are not valid tag names; ignored them");
        }
        tracing::debug!(%repo, pages, tags = tags.len(), "listed tags");
        Ok((tags, pages))
    }

    /// Names of every repository of `registry` (`GET /v2/_catalog`, following `Link`
    /// pagination), sorted and without duplicates: how pattern watches find their members.
    ///
    /// The catalog is an extension of the distribution API. Registries that do not serve it
    /// answer 404 (or 405); token-based registries answer 401/403 to credentials without the
    /// `registry:catalog:*` scope. Those answers are returned as the usual errors
    /// ([`RegistryError::NotFound`], [`RegistryError::Unauthorized`]) for the caller to
    /// report. Names that are not valid repository names are dropped.
    pub async fn list_repositories(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Result<Vec<String>, RegistryError> {
        Ok(self.list_repositories_paged(registry, creds).await?.0)
    }

    /// [`Self::list_repositories`], also returning how many pages were read.
    pub async fn list_repositories_paged(
        &self,
        registry: &str,
        creds: &Credentials,
    ) -> Result<(Vec<String>, usize), RegistryError> {
        #[derive(serde::Deserialize)]
        struct Page {
            repositories: Option<Vec<String>>,
        }

        let registry = registry.to_ascii_lowercase();
        // The catalog is not a repository; this reference only carries the host (rate limit,
        // learnt auth scheme, token cache) and names the endpoint in errors.
        let target = RepositoryRef {
            registry: registry.clone(),
            path: CATALOG_PATH.to_string(),
        };
        let scheme = self.scheme_for(&registry);
        let base =
            Url::parse(&format!("{scheme}://{registry}/v2/{CATALOG_PATH}")).map_err(|e| {
                RegistryError::InvalidReference(format!(
                    "cannot form the catalog URL of {registry}: {e}"
                ))
            })?;
        let mut names = Vec::new();
        let mut dropped = 0usize;
        let pages = self
            .read_pages(
                base,
                Listing {
                    subject: &registry,
                    what: "repository catalog",
                    target: &target,
                },
                |url| {
                    let target = &target;
                    async move {
                        self.send_scoped(
                            target,
                            CATALOG_SCOPE,
                            creds,
                            Method::GET,
                            &url,
                            "application/json",
                        )
                        .await
                    }
                },
                |page: Page| {
                    for name in page.repositories.unwrap_or_default() {
                        match RepositoryRef::parse(&format!("{registry}/{name}")) {
                            Ok(parsed) if parsed.path == name => names.push(name),
                            _ => dropped += 1,
                        }
                    }
                },
            )
            .await?;
        if dropped > 0 {
            tracing::warn!(%registry, dropped, "registry catalog listed invalid repository names; ignored them");
        }
        names.sort();
        names.dedup();
        tracing::debug!(%registry, pages, repositories = names.len(), "listed the catalog");
        Ok((names, pages))
    }

    /// Reads a paged listing from `base`: asks for the configured page size (`n`), follows
    /// `Link` headers within the page bound, refuses a loop, and hands each page's JSON to
    /// `on_page`. A registry that refuses `n` on the first page with
    /// `PAGINATION_NUMBER_INVALID` (distribution caps it: `tags.maxtags`,
    /// `catalog.maxentries`) is read again from the start with its own page size. Returns
    /// the pages read.
    async fn read_pages<P, S, Fut>(
        &self,
        base: Url,
        listing: Listing<'_>,
        send: S,
        mut on_page: impl FnMut(P),
    ) -> Result<usize, RegistryError>
    where
        P: serde::de::DeserializeOwned,
        S: Fn(Url) -> Fut,
        Fut: Future<Output = Result<reqwest::Response, RegistryError>>,
    {
        let Listing {
            subject,
            what,
            target,
        } = listing;
        let mut url = base.clone();
        let mut page_size = self.inner.paging.page_size;
        if let Some(n) = page_size {
            url.query_pairs_mut().append_pair("n", &n.to_string());
        }
        let mut visited = HashSet::new();
        let mut pages = 0usize;
        loop {
            if pages >= self.inner.paging.max_pages {
                return Err(RegistryError::Protocol(format!(
                    "{subject}: {what} still continues after {pages} pages; refusing to read further"
                )));
            }
            if !visited.insert(url.to_string()) {
                return Err(RegistryError::Protocol(format!(
                    "{subject}: {what} pagination loops back to {url}"
                )));
            }
            let response = send(url.clone()).await?;
            let status = response.status();
            if !status.is_success() {
                let failure = read_failure(response).await;
                if pages == 0
                    && page_size.is_some()
                    && status == StatusCode::BAD_REQUEST
                    && failure
                        .codes
                        .iter()
                        .any(|c| c == "PAGINATION_NUMBER_INVALID")
                {
                    tracing::debug!(%subject, what, "registry rejected the page size; retrying without n");
                    page_size = None;
                    url = base.clone();
                    visited.clear();
                    continue;
                }
                return Err(failure.into_error(target, Endpoint::Registry));
            }
            pages += 1;
            let next = next_link(response.headers(), &url)?;
            let body = read_body(response, MAX_TAGS_PAGE_BYTES).await?;
            let page: P = serde_json::from_slice(&body).map_err(|e| {
                RegistryError::Protocol(format!("{subject}: {what} is not valid JSON: {e}"))
            })?;
            on_page(page);
            match next {
                Some(next) => url = next,
                None => return Ok(pages),
            }
        }
    }
}

/// What a paged listing reads, for its errors: the repository or registry it names, the
/// kind of listing, and the reference errors are reported against.
struct Listing<'a> {
    subject: &'a str,
    what: &'a str,
    target: &'a RepositoryRef,
}

impl TagSource for RegistryClient {
    fn list<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        Box::pin(async move {
            let tags = self.list_tags(repo, creds).await?;
            Ok(tags
                .into_iter()
                .map(|tag| TagInfo {
                    tag,
                    digest: None,
                    pushed_at: None,
                })
                .collect())
        })
    }

    fn digest<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        reference: &'a str,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Option<String>, RegistryError>> {
        Box::pin(self.manifest_digest(repo, reference, creds))
    }

    fn list_with_times<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
        budget: Option<u32>,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        Box::pin(async move { Ok(self.list_tags_with_times(repo, creds, budget).await?.tags) })
    }
}

/// Finds the `rel="next"` target among the `Link` headers and resolves it against the
/// current page URL.
///
/// The target must be on the same host as the registry: the next request carries the
/// credentials, so a foreign host in a Link header must not receive them. A target on the
/// same host keeps the current scheme and port, because proxies in front of registries
/// often write `http://` links while serving HTTPS.
fn next_link(headers: &HeaderMap, current: &Url) -> Result<Option<Url>, RegistryError> {
    let Some(target) = headers
        .get_all(LINK)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(parse_link_header)
        .find(|link| link.rels.iter().any(|r| r.eq_ignore_ascii_case("next")))
        .map(|link| link.target)
    else {
        return Ok(None);
    };
    let resolved = current
        .join(&target)
        .map_err(|e| RegistryError::Protocol(format!("invalid pagination link {target:?}: {e}")))?;
    if resolved.host_str() != current.host_str() {
        return Err(RegistryError::Protocol(format!(
            "pagination link {target:?} points to another host; not following it"
        )));
    }
    let mut next = current.clone();
    next.set_path(resolved.path());
    next.set_query(resolved.query());
    Ok(Some(next))
}

/// One link of a `Link` header (RFC 8288).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub target: String,
    pub rels: Vec<String>,
}

/// Parses `<target>; rel="next"; foo=bar, <other>; rel=prev`. Commas inside `<...>` or
/// quoted values do not split links. Entries without `<...>` are skipped.
pub fn parse_link_header(value: &str) -> Vec<Link> {
    let mut links = Vec::new();
    let mut rest = value;
    while let Some(open) = rest.find('<') {
        let after_open = &rest[open + 1..];
        let Some(close) = after_open.find('>') else {
            break;
        };
        let target = after_open[..close].trim().to_string();
        let mut params = &after_open[close + 1..];

        // Parameters run until a comma outside quotes.
        let mut in_quotes = false;
        let mut escaped = false;
        let mut end = params.len();
        for (i, c) in params.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_quotes => escaped = true,
                '"' => in_quotes = !in_quotes,
                ',' if !in_quotes => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        rest = params.get(end + 1..).unwrap_or("");
        params = &params[..end];

        let mut rels = Vec::new();
        for param in params.split(';') {
            let Some((name, raw)) = param.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("rel") {
                let raw = raw.trim();
                let unquoted = raw
                    .strip_prefix('"')
                    .and_then(|r| r.strip_suffix('"'))
                    .unwrap_or(raw);
                rels.extend(unquoted.split_whitespace().map(str::to_string));
            }
        }
        links.push(Link { target, rels });
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    fn headers(links: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for link in links {
            map.append(LINK, HeaderValue::from_str(link).unwrap());
        }
        map
    }

    #[test]
    fn link_header_forms() {
        let links = parse_link_header(r#"</v2/a/tags/list?n=1&last=b>; rel="next""#);
        assert_eq!(
            links,
            vec![Link {
                target: "/v2/a/tags/list?n=1&last=b".into(),
                rels: vec!["next".into()]
            }]
        );
        let links = parse_link_header(
            r#"<https://r.io/v2/a/tags/list?last=x,y>; title="a, b"; rel=prev, <https://r.io/v2/a/tags/list?last=z>; REL="next last""#,
        );
        assert_eq!(links.len(), 2);
        assert_eq!(links[0].target, "https://r.io/v2/a/tags/list?last=x,y");
        assert_eq!(links[0].rels, vec!["prev"]);
        assert_eq!(links[1].rels, vec!["next", "last"]);
        assert_eq!(parse_link_header("garbage"), vec![]);
        assert_eq!(parse_link_header("<unterminated"), vec![]);
    }

    #[test]
    fn next_link_resolution() {
        let current = Url::parse("https://r.io/v2/team/app/tags/list?n=2").unwrap();
        // Relative.
        let next = next_link(
            &headers(&[r#"</v2/team/app/tags/list?n=2&last=b>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            next.as_str(),
            "https://r.io/v2/team/app/tags/list?n=2&last=b"
        );
        // Absolute on the same host, even with a downgraded scheme.
        let next = next_link(
            &headers(&[r#"<http://r.io/v2/team/app/tags/list?last=c>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.as_str(), "https://r.io/v2/team/app/tags/list?last=c");
        // Only prev: no next page.
        assert_eq!(
            next_link(&headers(&[r#"</x>; rel="prev""#]), &current).unwrap(),
            None
        );
        assert_eq!(next_link(&headers(&[]), &current).unwrap(), None);
        // Separate Link headers.
        let next = next_link(
            &headers(&[r#"</p>; rel="prev""#, r#"</n>; rel="next""#]),
            &current,
        )
        .unwrap()
        .unwrap();
        assert_eq!(next.path(), "/n");
        // Another host must not get the credentials.
        assert!(matches!(
            next_link(
                &headers(&[r#"<https://evil.io/v2/x>; rel="next""#]),
                &current
            ),
            Err(RegistryError::Protocol(_))
        ));
    }
}
