//! Scan step, per-registry settings: plain HTTP, an extra CA, request rate, the budget of
//! created-time lookups and the repositories per shared bearer token, read from a JSON or
//! YAML document (a mounted ConfigMap file).
//!
//! # Format
//!
//! One object with a `registries` map from `host[:port]` to settings. Every field is
//! optional; `*` holds defaults for hosts that are not listed and for fields a listed host
//! leaves out (it may not set `insecure`).
//!
//! ```yaml
//! registries:
//!   "*":
//!     ratePerSecond: 100     # steady requests per second per host (default 100; Docker Hub 10)
//!     burst: 200             # requests allowed at once before the rate applies (default 200; Docker Hub 20)
//!     metadataBudget: 50     # created-time lookups per repository per scan (default 50)
//!     repositoriesPerToken: 64  # repositories one shared bearer token names (default 64)
//!   "registry.internal:5000":
//!     insecure: true         # plain HTTP instead of HTTPS
//!   harbor.example.com:
//!     caPem: |               # extra trusted CA (PEM, one or more certificates), added to
//!       -----BEGIN CERTIFICATE-----   # the system roots for this host only
//!       ...
//!       -----END CERTIFICATE-----
//!     ratePerSecond: 5
//!     burst: 10
//!     metadataBudget: 200
//!   docker.io:               # Docker Hub under any of its names
//!     ratePerSecond: 2
//! ```
//!
//! The same in JSON: `{"registries": {"harbor.example.com": {"caPem": "-----BEGIN…",
//! "ratePerSecond": 5}}}`. Field names may also be written in snake_case (`rate_per_second`,
//! `ca_pem`, `metadata_budget`, `repositories_per_token`). Unknown fields are errors, so a
//! typo does not silently leave a registry unthrottled. Host names are compared
//! case-insensitively; a scheme or a trailing `/` is ignored; `docker.io`, `index.docker.io`
//! and `registry-1.docker.io` all mean Docker Hub.

use std::collections::HashMap;

use super::error::RegistryError;
use super::ratelimit::{
    DEFAULT_BURST, DEFAULT_DOCKER_HUB_BURST, DEFAULT_DOCKER_HUB_RATE_PER_SECOND,
    DEFAULT_RATE_PER_SECOND,
};
use super::reference::{DOCKER_HUB_REGISTRY, is_docker_hub_host};

/// Key of the entry holding defaults for all hosts.
pub const DEFAULT_SETTINGS_KEY: &str = "*";

/// Created-time lookups per repository per scan when the settings do not say.
pub const DEFAULT_METADATA_BUDGET: u32 = 50;
/// The same for Docker Hub, where reading a manifest counts as a pull against Hub's rate
/// limit (100 per 6 hours for anonymous users).
pub const DEFAULT_DOCKER_HUB_METADATA_BUDGET: u32 = 10;

/// Repositories one registry-wide bearer token names when the settings do not say (see
/// [`super::wide_tokens`]). Every request to the registry carries its token, and a token's
/// `access` claim lists each repository it grants (about 100 bytes each in a JWT), so this
/// bounds the `Authorization` header at about 6–7 KB: within the 8 KiB a header line gets
/// from nginx by default (`large_client_header_buffers`), the front of many registries. A
/// token naming 5,000 repositories is about 480 KB, sent and checked with every request.
/// 5,000 repositories then take 79 token requests per token lifetime instead of 1.
pub const DEFAULT_REPOSITORIES_PER_TOKEN: u32 = 64;

/// Highest accepted `repositoriesPerToken`; also the pull scopes remembered per registry and
/// identity (see [`super::wide_tokens`]), so one token can still name every one of them.
pub const MAX_REPOSITORIES_PER_TOKEN: u32 = 5000;

/// Highest accepted `ratePerSecond`; more is certainly a typo.
const MAX_RATE_PER_SECOND: f64 = 10_000.0;

/// Settings for one registry host (see the [module docs](self) for the file format).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySettings {
    /// Reach the host over plain HTTP instead of HTTPS.
    #[serde(default)]
    pub insecure: bool,
    /// PEM certificates trusted for this host in addition to the system roots (a private
    /// CA). Such a host gets its own HTTP client.
    #[serde(default, alias = "ca_pem")]
    pub ca_pem: Option<String>,
    /// Steady request rate to this host; default [`DEFAULT_RATE_PER_SECOND`].
    #[serde(default, alias = "rate_per_second")]
    pub rate_per_second: Option<f64>,
    /// Requests allowed at once before the rate applies; default [`DEFAULT_BURST`].
    #[serde(default)]
    pub burst: Option<u32>,
    /// Created-time lookups per repository per scan; default [`DEFAULT_METADATA_BUDGET`].
    /// `0` turns lookups off for the host (tags then have no time for `Newest`).
    #[serde(default, alias = "metadata_budget")]
    pub metadata_budget: Option<u32>,
    /// Repositories one registry-wide bearer token is asked for; default
    /// [`DEFAULT_REPOSITORIES_PER_TOKEN`]. `1` gives every repository a token of its own.
    #[serde(default, alias = "repositories_per_token")]
    pub repositories_per_token: Option<u32>,
}

/// The effective limits of one host: its settings over the `*` defaults over built-ins.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    pub rate_per_second: f64,
    pub burst: u32,
    pub metadata_budget: u32,
    pub repositories_per_token: u32,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    registries: HashMap<String, RegistrySettings>,
}

/// Parses a registries document (JSON or YAML; see the [module docs](self)) and validates
/// it: host names, positive finite rates, bursts of at least 1, CA PEMs that hold at least
/// one certificate. Keys come back normalised (lower case, Docker Hub as
/// `registry-1.docker.io`). An empty document means no settings.
pub fn parse_registries_config(
    yaml_or_json: &str,
) -> Result<HashMap<String, RegistrySettings>, RegistryError> {
    let invalid = |why: String| RegistryError::InvalidConfig(format!("registries config: {why}"));
    let text = yaml_or_json.trim_start_matches('\u{feff}').trim();
    if text.is_empty() {
        return Ok(HashMap::new());
    }
    let file: File = if text.starts_with('{') {
        // JSON gets serde_json's precise error positions.
        serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?
    } else {
        serde_saphyr::from_str(text).map_err(|e| invalid(e.to_string()))?
    };
    normalize_registries(file.registries)
}

/// Validates settings given in code and normalises their keys, as
/// [`parse_registries_config`] does for a document.
pub fn normalize_registries(
    registries: HashMap<String, RegistrySettings>,
) -> Result<HashMap<String, RegistrySettings>, RegistryError> {
    let invalid = |why: String| RegistryError::InvalidConfig(format!("registries config: {why}"));
    let mut out = HashMap::new();
    for (raw_host, settings) in registries {
        let host = normalize_settings_host(&raw_host).ok_or_else(|| {
            invalid(format!(
                "{raw_host:?} is not a registry host[:port] (write e.g. ghcr.io or registry.local:5000)"
            ))
        })?;
        validate_settings(&host, &settings).map_err(&invalid)?;
        if out.insert(host.clone(), settings).is_some() {
            return Err(invalid(format!("{host} is listed twice")));
        }
    }
    Ok(out)
}

fn validate_settings(host: &str, settings: &RegistrySettings) -> Result<(), String> {
    if host == DEFAULT_SETTINGS_KEY && settings.insecure {
        return Err("\"*\" cannot set insecure; list each plain-HTTP host".into());
    }
    if settings.insecure && settings.ca_pem.is_some() {
        return Err(format!(
            "{host}: insecure (plain HTTP) and caPem (TLS) exclude each other"
        ));
    }
    if let Some(rate) = settings.rate_per_second
        && !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE_PER_SECOND)
    {
        return Err(format!(
            "{host}: ratePerSecond must be above 0 and at most {MAX_RATE_PER_SECOND}, not {rate}"
        ));
    }
    if settings.burst == Some(0) {
        return Err(format!("{host}: burst must be at least 1"));
    }
    if let Some(n) = settings.repositories_per_token
        && !(1..=MAX_REPOSITORIES_PER_TOKEN).contains(&n)
    {
        return Err(format!(
            "{host}: repositoriesPerToken must be from 1 to {MAX_REPOSITORIES_PER_TOKEN}, not {n}"
        ));
    }
    if let Some(pem) = &settings.ca_pem {
        parse_ca_pem(pem).map_err(|e| format!("{host}: caPem: {e}"))?;
    }
    Ok(())
}

/// The certificates of a PEM bundle; at least one is required, and each must be usable as
/// a trust anchor (checked here so a broken CA fails when the settings load, not at the
/// first connection).
pub fn parse_ca_pem(pem: &str) -> Result<Vec<reqwest::Certificate>, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;

    let ders = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate bundle: {e}"))?;
    if ders.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    let mut store = rustls::RootCertStore::empty();
    ders.iter()
        .map(|der| {
            store
                .add(der.clone())
                .map_err(|e| format!("unusable certificate: {e}"))?;
            reqwest::Certificate::from_der(der).map_err(|e| format!("unusable certificate: {e}"))
        })
        .collect()
}

pub(super) fn normalize_host(host: &str) -> String {
    let lower = host.trim().to_ascii_lowercase();
    let without_scheme = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or(&lower);
    without_scheme.trim_end_matches('/').to_string()
}

/// `host[:port]` as registries are keyed: lower case, no scheme, no trailing `/`, Docker
/// Hub under its API host. `None` for something that cannot be a host.
pub fn normalize_settings_host(raw: &str) -> Option<String> {
    let host = normalize_host(raw);
    if host == DEFAULT_SETTINGS_KEY {
        return Some(host);
    }
    if host.is_empty()
        || host.contains('/')
        || host.contains('@')
        || host.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return None;
    }
    if is_docker_hub_host(&host) {
        return Some(DOCKER_HUB_REGISTRY.to_string());
    }
    Some(host)
}

/// The key a host's settings are stored under ([`normalize_settings_host`], or just the
/// normalised text for something that is not a host).
pub fn host_key(host: &str) -> String {
    normalize_settings_host(host).unwrap_or_else(|| normalize_host(host))
}

/// Effective limits for `host` given the normalised settings.
pub fn limits_for(registries: &HashMap<String, RegistrySettings>, host: &str) -> Limits {
    let own = registries.get(host);
    let defaults = registries.get(DEFAULT_SETTINGS_KEY);
    let pick =
        |f: fn(&RegistrySettings) -> Option<f64>| own.and_then(f).or_else(|| defaults.and_then(f));
    let pick_u32 =
        |f: fn(&RegistrySettings) -> Option<u32>| own.and_then(f).or_else(|| defaults.and_then(f));
    let hub = host == DOCKER_HUB_REGISTRY;
    Limits {
        rate_per_second: pick(|s| s.rate_per_second).unwrap_or(if hub {
            DEFAULT_DOCKER_HUB_RATE_PER_SECOND
        } else {
            DEFAULT_RATE_PER_SECOND
        }),
        burst: pick_u32(|s| s.burst).unwrap_or(if hub {
            DEFAULT_DOCKER_HUB_BURST
        } else {
            DEFAULT_BURST
        }),
        metadata_budget: pick_u32(|s| s.metadata_budget).unwrap_or(
            if host == DOCKER_HUB_REGISTRY {
                DEFAULT_DOCKER_HUB_METADATA_BUDGET
            } else {
                DEFAULT_METADATA_BUDGET
            },
        ),
        repositories_per_token: pick_u32(|s| s.repositories_per_token)
            .unwrap_or(DEFAULT_REPOSITORIES_PER_TOKEN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insecure_host_normalisation() {
        assert_eq!(normalize_host(" HTTP://Reg.Local:5000/ "), "reg.local:5000");
        assert_eq!(normalize_host("reg.local"), "reg.local");
    }

    #[test]
    fn yaml_and_json_forms() {
        let yaml = r#"
registries:
  "*":
    ratePerSecond: 4
    metadataBudget: 10
  "Registry.Internal:5000":
    insecure: true
  https://harbor.example.com/:
    rate_per_second: 2.5
    burst: 3
    repositoriesPerToken: 500
  docker.io:
    metadataBudget: 0
"#;
        let parsed = parse_registries_config(yaml).unwrap();
        assert_eq!(parsed.len(), 4);
        assert!(parsed["registry.internal:5000"].insecure);
        assert_eq!(parsed["harbor.example.com"].rate_per_second, Some(2.5));
        assert_eq!(parsed[DOCKER_HUB_REGISTRY].metadata_budget, Some(0));

        let l = limits_for(&parsed, "harbor.example.com");
        assert_eq!(
            (l.rate_per_second, l.burst, l.metadata_budget),
            (2.5, 3, 10)
        );
        assert_eq!(l.repositories_per_token, 500);
        assert_eq!(
            limits_for(&parsed, "elsewhere.io").repositories_per_token,
            DEFAULT_REPOSITORIES_PER_TOKEN
        );
        let l = limits_for(&parsed, "elsewhere.io");
        assert_eq!(
            (l.rate_per_second, l.burst, l.metadata_budget),
            (4.0, DEFAULT_BURST, 10)
        );
        let l = limits_for(&parsed, DOCKER_HUB_REGISTRY);
        assert_eq!(l.metadata_budget, 0);
        let hub = limits_for(&HashMap::new(), DOCKER_HUB_REGISTRY);
        assert_eq!(
            (hub.rate_per_second, hub.burst, hub.metadata_budget),
            (
                DEFAULT_DOCKER_HUB_RATE_PER_SECOND,
                DEFAULT_DOCKER_HUB_BURST,
                DEFAULT_DOCKER_HUB_METADATA_BUDGET
            )
        );
        let l = limits_for(&HashMap::new(), "elsewhere.io");
        assert_eq!(
            (l.rate_per_second, l.burst, l.metadata_budget),
            (
                DEFAULT_RATE_PER_SECOND,
                DEFAULT_BURST,
                DEFAULT_METADATA_BUDGET
            )
        );

        let json = r#"{"registries":{"ghcr.io":{"ratePerSecond":1,"burst":1}}}"#;
        let parsed = parse_registries_config(json).unwrap();
        assert_eq!(parsed["ghcr.io"].burst, Some(1));
        assert!(parse_registries_config("  \n").unwrap().is_empty());
        assert!(
            parse_registries_config("registries: {}")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn invalid_documents_say_why() {
        for (doc, needle) in [
            (
                r#"{"registries":{"a.io":{"rateperSecond":1}}}"#,
                "unknown field",
            ),
            (
                r#"{"registries":{"a.io":{"ratePerSecond":0}}}"#,
                "ratePerSecond",
            ),
            (
                r#"{"registries":{"a.io":{"ratePerSecond":-1}}}"#,
                "ratePerSecond",
            ),
            (r#"{"registries":{"a.io":{"burst":0}}}"#, "burst"),
            (
                r#"{"registries":{"a.io":{"repositoriesPerToken":0}}}"#,
                "repositoriesPerToken must be from 1 to 5000",
            ),
            (
                r#"{"registries":{"*":{"repositoriesPerToken":5001}}}"#,
                "repositoriesPerToken",
            ),
            (r#"{"registries":{"a.io/x":{}}}"#, "not a registry host"),
            (r#"{"registries":{"*":{"insecure":true}}}"#, "insecure"),
            (
                r#"{"registries":{"a.io":{"caPem":"-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n"}}}"#,
                "caPem",
            ),
            (r#"{"registries":{"a.io":{"caPem":"hello"}}}"#, "caPem"),
            (r#"{"registries":{"A.io":{},"a.io":{}}}"#, "listed twice"),
            (
                r#"{"registries":{"a.io":{"insecure":true,"caPem":"x"}}}"#,
                "exclude",
            ),
            (r#"{"other":1}"#, "unknown field"),
            ("registries: [1, 2]", "registries config"),
            ("{not json", "registries config"),
        ] {
            let err = parse_registries_config(doc).unwrap_err();
            assert_eq!(err.category(), "invalid_config", "{doc}");
            assert!(err.to_string().contains(needle), "{doc}: {err}");
        }
    }
}
