//! Scan step, credentials: reading the entry for one registry out of a Kubernetes pull
//! secret (`kubernetes.io/dockerconfigjson`, and the older `kubernetes.io/dockercfg`).
//!
//! The controller loads the secret named by the watch and calls
//! [`from_dockerconfigjson`] with the registry host of the watched image. Keys in `auths`
//! come in many spellings (`ghcr.io`, `https://ghcr.io`, `https://index.docker.io/v1/`), so
//! they are normalised to a bare `host[:port]` before matching, and Docker Hub's aliases all
//! match each other. A secret without an entry for the host is reported as `Ok(None)` rather
//! than silently falling back to anonymous access, so the user learns the secret is wrong.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

use super::auth::Credentials;
use super::error::RegistryError;
use super::reference::is_docker_hub_host;

/// Tools differ on base64 padding in `auth`, so accept both.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Finds the credentials for `registry_host` (`host[:port]`, as in
/// [`RepositoryRef::registry`](super::RepositoryRef)) in a docker config JSON.
///
/// Returns `Ok(None)` when the secret has no entry for the host, and
/// [`RegistryError::InvalidCredentials`] when the JSON or the matching entry is unusable.
/// Error messages name hosts and fields, never secret values.
pub fn from_dockerconfigjson(
    json_bytes: &[u8],
    registry_host: &str,
) -> Result<Option<Credentials>, RegistryError> {
    let auths = auths_map(json_bytes)?;
    let wanted = normalize_key(registry_host);
    let wanted_is_hub = is_docker_hub_host(&wanted);

    // Rank candidates so the choice does not depend on key order: an exact key beats a
    // normalised match, which beats a Docker Hub alias.
    let best = auths
        .iter()
        .filter_map(|(key, entry)| {
            let host = normalize_key(key);
            let rank = if key.eq_ignore_ascii_case(registry_host) {
                0
            } else if host == wanted {
                1
            } else if wanted_is_hub && is_docker_hub_host(&host) {
                2
            } else {
                return None;
            };
            Some((rank, key, entry))
        })
        .min_by_key(|(rank, key, _)| (*rank, key.as_str()));

    match best {
        None => Ok(None),
        Some((_, key, entry)) => parse_entry(key, entry).map(Some),
    }
}

/// The registry hosts a docker config JSON has entries for, normalised; lets the caller
/// say "the secret has entries for X, Y but not Z".
pub fn dockerconfig_hosts(json_bytes: &[u8]) -> Result<Vec<String>, RegistryError> {
    let auths = auths_map(json_bytes)?;
    let mut hosts: Vec<String> = auths.keys().map(|k| normalize_key(k)).collect();
    hosts.sort();
    hosts.dedup();
    Ok(hosts)
}

fn auths_map(
    json_bytes: &[u8],
) -> Result<serde_json::Map<String, serde_json::Value>, RegistryError> {
    let value: serde_json::Value = serde_json::from_slice(json_bytes).map_err(|e| {
        RegistryError::InvalidCredentials(format!("pull secret is not valid JSON: {e}"))
    })?;
    let serde_json::Value::Object(mut top) = value else {
        return Err(RegistryError::InvalidCredentials(
            "pull secret JSON is not an object".into(),
        ));
    };
    match top.remove("auths") {
        Some(serde_json::Value::Object(auths)) => Ok(auths),
        Some(_) => Err(RegistryError::InvalidCredentials(
            "pull secret field \"auths\" is not an object".into(),
        )),
        // Legacy `.dockercfg`: the host entries are at the top level. Non-object values
        // (e.g. `credsStore`) cannot be entries and are dropped.
        None => Ok(top.into_iter().filter(|(_, v)| v.is_object()).collect()),
    }
}

/// Reduces an `auths` key to `host[:port]`: drops the scheme and any path (`/v1/`), and
/// lower-cases, since host names are case-insensitive.
fn normalize_key(key: &str) -> String {
    let key = key.trim();
    let lower = key.to_ascii_lowercase();
    let without_scheme = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
        .unwrap_or(&lower);
    let host = without_scheme
        .split_once('/')
        .map_or(without_scheme, |(host, _)| host);
    host.to_string()
}

fn parse_entry(key: &str, entry: &serde_json::Value) -> Result<Credentials, RegistryError> {
    let invalid =
        |why: &str| RegistryError::InvalidCredentials(format!("pull secret entry {key:?} {why}"));
    let field = |name: &str| {
        entry
            .get(name)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };

    let (username, password) = if let Some(auth) = field("auth") {
        let cleaned: String = auth.chars().filter(|c| !c.is_whitespace()).collect();
        let decoded = LENIENT_BASE64
            .decode(cleaned.as_bytes())
            .map_err(|_| invalid("has an \"auth\" value that is not valid base64"))?;
        let decoded = String::from_utf8(decoded)
            .map_err(|_| invalid("has an \"auth\" value that is not UTF-8 after decoding"))?;
        let (user, pass) = decoded
            .split_once(':')
            .ok_or_else(|| invalid("has an \"auth\" value without the user:password separator"))?;
        (user.to_string(), pass.to_string())
    } else if let Some(user) = field("username") {
        (
            user.to_string(),
            field("password").unwrap_or("").to_string(),
        )
    } else if field("identitytoken").is_some() || field("registrytoken").is_some() {
        return Err(invalid(
            "holds only an identity/registry token, which is not supported; store a username and password (or access token as password)",
        ));
    } else {
        return Err(invalid(
            "has neither \"auth\" nor \"username\"/\"password\" (credential helpers are not supported)",
        ));
    };
    if username.is_empty() {
        return Err(invalid("has an empty username"));
    }
    if password.is_empty() {
        return Err(invalid("has an empty password"));
    }
    Ok(Credentials::Basic { username, password })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn basic(u: &str, p: &str) -> Option<Credentials> {
        Some(Credentials::basic(u, p))
    }

    #[test]
    fn auth_field_and_key_spellings() {
        let json = format!(
            r#"{{"auths":{{
                "ghcr.io":{{"auth":"{}"}},
                "https://quay.io":{{"auth":"{}"}},
                "http://127.0.0.1:5000/v2/":{{"auth":"{}"}},
                "Registry.Example.com/v1/":{{"username":"u4","password":"p4"}}
            }}}}"#,
            b64("u1:p1"),
            b64("u2:p:with:colons"),
            b64("u3:p3"),
        );
        let get = |host: &str| from_dockerconfigjson(json.as_bytes(), host).unwrap();
        assert_eq!(get("ghcr.io"), basic("u1", "p1"));
        assert_eq!(get("quay.io"), basic("u2", "p:with:colons"));
        assert_eq!(get("127.0.0.1:5000"), basic("u3", "p3"));
        assert_eq!(get("registry.example.com"), basic("u4", "p4"));
        assert_eq!(get("127.0.0.1"), None);
        assert_eq!(get("gcr.io"), None);
        assert_eq!(
            dockerconfig_hosts(json.as_bytes()).unwrap(),
            vec![
                "127.0.0.1:5000",
                "ghcr.io",
                "quay.io",
                "registry.example.com"
            ]
        );
    }

    #[test]
    fn docker_hub_aliases() {
        for key in [
            "https://index.docker.io/v1/",
            "docker.io",
            "index.docker.io",
            "registry-1.docker.io",
        ] {
            let json = format!(r#"{{"auths":{{"{key}":{{"auth":"{}"}}}}}}"#, b64("hub:pw"));
            for host in ["registry-1.docker.io", "docker.io", "index.docker.io"] {
                assert_eq!(
                    from_dockerconfigjson(json.as_bytes(), host).unwrap(),
                    basic("hub", "pw"),
                    "key {key} host {host}"
                );
            }
        }
    }

    #[test]
    fn exact_key_wins_over_alias() {
        let json = format!(
            r#"{{"auths":{{"https://index.docker.io/v1/":{{"auth":"{}"}},"registry-1.docker.io":{{"auth":"{}"}}}}}}"#,
            b64("alias:pw"),
            b64("exact:pw"),
        );
        assert_eq!(
            from_dockerconfigjson(json.as_bytes(), "registry-1.docker.io").unwrap(),
            basic("exact", "pw")
        );
    }

    #[test]
    fn lenient_base64_and_auth_precedence() {
        // "a:bc" encodes with one '=' of padding; accept it without.
        let unpadded = b64("a:bc").trim_end_matches('=').to_string();
        let json = format!(
            r#"{{"auths":{{"h.io":{{"auth":"{unpadded}","username":"ignored","password":"x"}}}}}}"#
        );
        assert_eq!(
            from_dockerconfigjson(json.as_bytes(), "h.io").unwrap(),
            basic("a", "bc")
        );
    }

    #[test]
    fn legacy_dockercfg() {
        let json = format!(
            r#"{{"https://h.io":{{"auth":"{}","email":"x@y"}},"credsStore":"desktop"}}"#,
            b64("old:pw")
        );
        assert_eq!(
            from_dockerconfigjson(json.as_bytes(), "h.io").unwrap(),
            basic("old", "pw")
        );
    }

    #[test]
    fn unusable_entries_are_errors_without_secrets() {
        let cases = [
            (
                r#"{"auths":{"h.io":{"auth":"!!!"}}}"#.to_string(),
                "not valid base64",
            ),
            (
                format!(r#"{{"auths":{{"h.io":{{"auth":"{}"}}}}}}"#, b64("nocolon")),
                "separator",
            ),
            (
                format!(r#"{{"auths":{{"h.io":{{"auth":"{}"}}}}}}"#, b64(":pw")),
                "empty username",
            ),
            (
                format!(r#"{{"auths":{{"h.io":{{"auth":"{}"}}}}}}"#, b64("u:")),
                "empty password",
            ),
            (
                r#"{"auths":{"h.io":{"username":"u"}}}"#.to_string(),
                "empty password",
            ),
            (r#"{"auths":{"h.io":{}}}"#.to_string(), "credential helpers"),
            (
                r#"{"auths":{"h.io":{"identitytoken":"tok"}}}"#.to_string(),
                "identity",
            ),
            (r#"{"auths":[]}"#.to_string(), "not an object"),
            (r#"[]"#.to_string(), "not an object"),
            ("{".to_string(), "not valid JSON"),
        ];
        for (json, expected) in cases {
            let err = from_dockerconfigjson(json.as_bytes(), "h.io").unwrap_err();
            assert!(
                matches!(err, RegistryError::InvalidCredentials(_)),
                "{json}"
            );
            let text = err.to_string();
            assert!(text.contains(expected), "{json}: {text}");
            assert!(!text.contains("pw") && !text.contains("tok\""), "{text}");
        }
        let err = from_dockerconfigjson(
            format!(r#"{{"auths":{{"h.io":{{"auth":"{}"}}}}}}"#, b64("u:\u{0}")).as_bytes(),
            "h.io",
        );
        assert!(err.is_ok());
        assert!(
            from_dockerconfigjson(br#"{"auths":{"h.io":{"auth":"/w=="}}}"#, "h.io")
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }

    #[test]
    fn empty_config_has_no_entry() {
        assert_eq!(
            from_dockerconfigjson(br#"{"auths":{}}"#, "h.io").unwrap(),
            None
        );
        assert_eq!(from_dockerconfigjson(br#"{}"#, "h.io").unwrap(), None);
    }
}
