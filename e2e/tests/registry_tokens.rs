//! Registry-wide tokens against a real CNCF distribution registry with Docker token
//! authentication (`docker-registry` with the token server of
//! [`imagewatch_e2e::token_registry`], which signs real JWTs the registry checks): 1,500
//! repositories announced and listed at once take one token request per 64 of them at the
//! default `repositoriesPerToken` (the registry accepts each token), or with
//! `repositoriesPerToken: 5000` one request (the OAuth2 form `POST`) for all of them; as
//! many again after the tokens expire. Needs `docker-registry` and `openssl` on PATH (the
//! test fails without them); no test ground.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use imagewatch::registry::{
    Credentials, RegistryClient, RegistryOptions, RegistrySettings, RepositoryRef,
};
use imagewatch_e2e::token_registry::TokenRegistry;

/// Their scopes would make a 68 KB token URL, beyond the 64 KiB a `GET` is given: one token
/// for all of them needs the form.
const REPOSITORIES: usize = 1500;

/// Lists every repository, 100 at a time; each answers `NAME_UNKNOWN` (nothing is pushed),
/// which the registry sends only to a token granting the repository (401 otherwise).
async fn list_all(client: &RegistryClient, repos: &[RepositoryRef], creds: &Credentials) {
    let outcomes: Vec<_> = futures::stream::iter(repos)
        .map(|repo| async move { (repo, client.list_tags(repo, creds).await) })
        .buffer_unordered(100)
        .collect()
        .await;
    for (repo, outcome) in outcomes {
        match outcome {
            Err(e) if e.category() == "not_found" => {}
            other => panic!("{repo}: expected NAME_UNKNOWN behind the token, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_repositories_take_one_token_request_per_64_per_expiry()
-> anyhow::Result<()> {
    let cap = imagewatch::registry::DEFAULT_REPOSITORIES_PER_TOKEN as usize;
    tokens_per_expiry(None, REPOSITORIES.div_ceil(cap), cap).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_hundred_repositories_take_one_form_token_request_per_expiry() -> anyhow::Result<()>
{
    tokens_per_expiry(Some(5000), 1, REPOSITORIES).await
}

/// Lists every repository twice within the token lifetime and once after it, with
/// `repositoriesPerToken` set to `per_token` (the default when `None`): `requests` token
/// requests per lifetime, each naming at most `most_scopes`, all of them covering every
/// repository.
async fn tokens_per_expiry(
    per_token: Option<u32>,
    requests: usize,
    most_scopes: usize,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Long enough for two rounds of listings on a busy machine (the token is handed out for
    // its lifetime less a fifth, at most 30 s).
    let lifetime = Duration::from_secs(45);
    let registry = TokenRegistry::start(lifetime).await?;
    let settings = |insecure| RegistrySettings {
        insecure,
        rate_per_second: Some(10_000.0),
        burst: Some(10_000),
        repositories_per_token: per_token,
        ..RegistrySettings::default()
    };
    let client = RegistryClient::with_registries(
        RegistryOptions::default(),
        HashMap::from([
            (registry.host.clone(), settings(true)),
            (registry.token_host.clone(), settings(true)),
        ]),
    )?;
    let creds = Credentials::basic(&registry.user, &registry.password);
    let paths: Vec<String> = (0..REPOSITORIES)
        .map(|i| format!("tokens/app-{i:04}"))
        .collect();
    let repos = paths
        .iter()
        .map(|p| RepositoryRef::parse(&format!("{}/{p}", registry.host)))
        .collect::<Result<Vec<_>, _>>()?;
    // As the controller does before its first scans.
    client.expect_repositories(&registry.host, &creds, paths.iter().map(String::as_str));

    let started = Instant::now();
    list_all(&client, &repos, &creds).await;
    let first = registry.token_counts();
    eprintln!(
        "{REPOSITORIES} repositories, repositoriesPerToken {per_token:?}: {} token request(s) in {:.1} s",
        first.issued,
        started.elapsed().as_secs_f64()
    );
    let sizes: Vec<usize> = first
        .by_scope
        .keys()
        .map(|k| k.split(' ').count())
        .collect();
    assert_eq!(first.issued, requests as u64, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n <= most_scopes), "{sizes:?}");
    assert_eq!(first.refused, 0);
    assert_eq!(first.per_scope().len(), REPOSITORIES);
    assert_eq!(client.token_fetches(), requests as u64);

    // A second round inside the tokens' lifetime needs none.
    list_all(&client, &repos, &creds).await;
    assert_eq!(registry.token_counts().issued, requests as u64);

    // After the lifetime, as many requests renew the tokens for all of them.
    tokio::time::sleep_until((started + lifetime).into()).await;
    list_all(&client, &repos, &creds).await;
    let after = registry.token_counts().since(&first);
    assert_eq!(after.issued, requests as u64);
    assert_eq!(after.per_scope().len(), REPOSITORIES);
    assert_eq!(client.token_fetches(), 2 * requests as u64);
    Ok(())
}
