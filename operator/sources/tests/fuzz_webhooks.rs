//! Property-based fuzzing of the registry event parsers: webhook payloads
//! (`triggers::webhook::payloads::parse`) and ECR events from SQS
//! (`triggers::eventbridge::parse_message`).
//!
//! Inputs are arbitrary bytes, arbitrary JSON built from the field names the parsers look at,
//! and the fixtures of `tests/fixtures/webhooks/` with random structural mutations (values
//! replaced by strings, numbers, nulls, booleans or containers; keys deleted; strings edited;
//! the serialized body truncated). Properties:
//! - every parser returns `Ok` or `Err` and never panics;
//! - every event it returns names a non-empty registry and repository, in the normal form
//!   watches use (parsing `registry/repository` again gives the same pair), with a valid tag
//!   and digest when present and the provider's name as its source.
//!
//! The seed is fixed so runs are reproducible; set `PROPTEST_RNG_SEED` (and `PROPTEST_CASES`)
//! to explore further.

use std::path::Path;
use std::sync::LazyLock;

use imagewatch_registry::{RepositoryRef, is_ecr_host, is_valid_digest, is_valid_tag};
use imagewatch_sources::RegistryEvent;
use imagewatch_sources::eventbridge::{self, EVENT_SOURCE};
use imagewatch_sources::webhook::Provider;
use imagewatch_sources::webhook::payloads::{self, ParseOptions};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use serde_json::{Map, Value, json};

const DIGEST: &str = "sha256:5b0bcabd1ed22e9fb1310cf6c2dec7cdef19f0ad69efa1f392e94a4333501270";

fn config() -> ProptestConfig {
    let base = ProptestConfig::default();
    let cases = if std::env::var_os("PROPTEST_CASES").is_some() {
        base.cases
    } else {
        256
    };
    let rng_seed = if std::env::var_os("PROPTEST_RNG_SEED").is_some() {
        base.rng_seed
    } else {
        RngSeed::Fixed(0x1e57_f00d_0000_0001)
    };
    ProptestConfig {
        cases,
        rng_seed,
        failure_persistence: None,
        ..base
    }
}

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

struct Fixture {
    name: String,
    provider: Provider,
    value: Value,
}

fn provider_of(file_name: &str) -> Provider {
    Provider::ALL
        .into_iter()
        .find(|p| file_name.starts_with(&format!("{}-", p.name())))
        .unwrap_or_else(|| panic!("fixture {file_name} does not start with a provider name"))
}

static FIXTURES: LazyLock<Vec<Fixture>> = LazyLock::new(|| {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/webhooks");
    let mut fixtures: Vec<Fixture> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            Fixture {
                provider: provider_of(&name),
                value: serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}")),
                name,
            }
        })
        .collect();
    fixtures.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(fixtures.len() >= 6, "expected the webhook fixtures");
    fixtures
});

/// An ECR push as EventBridge puts it into the queue (the ECR user guide's example).
fn ecr_push_event() -> Value {
    json!({
        "version": "0",
        "id": "13cde686-328b-6117-af20-0e5566167482",
        "detail-type": "ECR Image Action",
        "source": "aws.ecr",
        "account": "123456789012",
        "time": "2019-11-16T01:54:34Z",
        "region": "us-west-2",
        "resources": [],
        "detail": {
            "result": "SUCCESS",
            "repository-name": "team/my-repository-name",
            "image-digest": DIGEST,
            "action-type": "PUSH",
            "image-tag": "latest"
        }
    })
}

/// The same event wrapped in an SNS notification.
fn sns_envelope(message: String) -> Value {
    json!({
        "Type": "Notification",
        "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
        "TopicArn": "arn:aws:sns:us-west-2:123456789012:ecr-events",
        "Message": message,
        "Timestamp": "2019-11-16T01:54:35.000Z",
        "SignatureVersion": "1",
    })
}

// ---------------------------------------------------------------------------------------
// Strategies
// ---------------------------------------------------------------------------------------

/// Strings that sit near the edges of what the parsers accept: hosts, paths, tags, digests,
/// media types, actions, and odd whitespace and Unicode.
fn interesting_string() -> BoxedStrategy<String> {
    let constants: Vec<&'static str> = vec![
        "",
        " ",
        "\t",
        "/",
        "//",
        ":",
        "@",
        "push",
        "pull",
        "published",
        "updated",
        "container",
        "CONTAINER",
        "docker",
        "PUSH_ARTIFACT",
        "pushImage",
        "harbor.artifact.pushed",
        "Notification",
        "SubscriptionConfirmation",
        "ECR Image Action",
        "aws.ecr",
        "PUSH",
        "SUCCESS",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json; charset=utf-8",
        "localhost",
        "localhost:5000",
        "LOCALHOST:5000",
        "[::1]:5000",
        "[::1",
        "[]",
        "registry.example.com",
        "Registry.Example.COM:443",
        "docker.io",
        "index.docker.io",
        "registry-1.docker.io",
        "ghcr.io",
        "quay.io/acme/app",
        "https://quay.io/acme/app",
        "http://user:pw@127.0.0.1:5000/v2/team/app/manifests/v1",
        "http://",
        "://",
        "h.example.com:99999/app",
        "h.example.com:0/app",
        "h.example.com/a/b:tag@sha256:abc",
        "team/app",
        "/team/app/",
        "Team/App",
        "team//app",
        "a__b/c--d/e.f",
        "library",
        "v1.2.3",
        "latest",
        "-bad",
        ".bad",
        "bad tag",
        "v1:2",
        "sha256:",
        DIGEST,
        "SHA256:5B0BCABD1ED22E9FB1310CF6C2DEC7CDEF19F0AD69EFA1F392E94A4333501270",
        "us-west-2",
        "cn-north-1",
        "US-WEST-2",
        "123456789012",
        "12345678901a",
        "é",
        "\u{0}",
        "\u{feff}",
        "\u{2028}",
        "漢字",
        "🦀",
    ];
    prop_oneof![
        4 => proptest::sample::select(constants).prop_map(str::to_owned),
        2 => "[a-zA-Z0-9._:/@\\[\\]+ -]{0,40}",
        1 => "[a-z0-9]{1,70}",
        1 => any::<String>(),
        // Very long, past every length limit.
        1 => ("[a-z]{1,3}", 100usize..400).prop_map(|(s, n)| s.repeat(n)),
    ]
    .boxed()
}

/// A JSON value to put in place of another.
fn replacement() -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        6 => interesting_string().prop_map(Value::String),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        1 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
    ];
    prop_oneof![
        8 => leaf.clone(),
        1 => Just(json!([])),
        1 => Just(json!({})),
        1 => prop::collection::vec(leaf, 0..4).prop_map(Value::Array),
    ]
    .boxed()
}

/// Field names the parsers read, so random objects reach past the first lookup.
const KEYS: &[&str] = &[
    "events",
    "action",
    "target",
    "mediaType",
    "repository",
    "tag",
    "digest",
    "url",
    "request",
    "host",
    "push_data",
    "repo_name",
    "namespace",
    "name",
    "package",
    "registry_package",
    "package_type",
    "ecosystem",
    "owner",
    "login",
    "package_version",
    "version",
    "container_metadata",
    "type",
    "event_data",
    "data",
    "resources",
    "resource_url",
    "repo_full_name",
    "docker_url",
    "updated_tags",
    "build_id",
    "registry",
    "Type",
    "Message",
    "detail-type",
    "source",
    "detail",
    "action-type",
    "result",
    "repository-name",
    "region",
    "account",
    "image-tag",
    "image-digest",
];

/// Arbitrary JSON whose object keys come from [`KEYS`].
fn keyed_json() -> impl Strategy<Value = Value> {
    replacement().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((proptest::sample::select(KEYS), inner), 0..6).prop_map(
                |entries| {
                    Value::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect::<Map<_, _>>(),
                    )
                }
            ),
        ]
    })
}

#[derive(Debug, Clone)]
enum Mutation {
    /// Replace the n-th node (pre-order, the root excluded) with a value.
    Replace(Index, Value),
    /// Delete a key of the n-th non-empty object.
    Delete(Index, Index),
    /// Insert a character into the n-th string, at a position.
    EditString(Index, Index, char),
    /// Duplicate the n-th array element (pushes with repeated resources).
    DuplicateItem(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), replacement()).prop_map(|(i, v)| Mutation::Replace(i, v)),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(i, k)| Mutation::Delete(i, k)),
        2 => (
            any::<Index>(),
            any::<Index>(),
            prop_oneof![
                Just(' '),
                Just('/'),
                Just(':'),
                Just('@'),
                Just('A'),
                Just('.'),
                Just('-'),
                any::<char>()
            ]
        )
            .prop_map(|(i, at, c)| Mutation::EditString(i, at, c)),
        1 => any::<Index>().prop_map(Mutation::DuplicateItem),
    ]
}

/// A mutated body: the mutations applied in order, then serialized (pretty or compact) and
/// possibly truncated.
#[derive(Debug, Clone)]
struct BodyPlan {
    mutations: Vec<Mutation>,
    pretty: bool,
    truncate: Option<Index>,
}

fn body_plan() -> impl Strategy<Value = BodyPlan> {
    (
        prop::collection::vec(mutation(), 0..6),
        any::<bool>(),
        prop::option::weighted(0.15, any::<Index>()),
    )
        .prop_map(|(mutations, pretty, truncate)| BodyPlan {
            mutations,
            pretty,
            truncate,
        })
}

/// JSON pointers (RFC 6901) of every node, root (`""`) first, in pre-order, with the nodes.
fn pointers(value: &Value) -> Vec<(String, &Value)> {
    fn walk<'a>(value: &'a Value, pointer: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((pointer.clone(), value));
        match value {
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    walk(item, format!("{pointer}/{i}"), out);
                }
            }
            Value::Object(map) => {
                for (key, item) in map {
                    let key = key.replace('~', "~0").replace('/', "~1");
                    walk(item, format!("{pointer}/{key}"), out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(value, String::new(), &mut out);
    out
}

/// The `index`-th node that `filter` accepts (the root included only when `root` is set).
fn pick<'a>(
    value: &'a mut Value,
    index: &Index,
    root: bool,
    filter: impl Fn(&Value) -> bool,
) -> Option<&'a mut Value> {
    let candidates: Vec<String> = pointers(value)
        .into_iter()
        .filter(|(pointer, node)| (root || !pointer.is_empty()) && filter(node))
        .map(|(pointer, _)| pointer)
        .collect();
    if candidates.is_empty() {
        return None;
    }
    value.pointer_mut(&candidates[index.index(candidates.len())])
}

fn apply(value: &mut Value, mutation: &Mutation) {
    match mutation {
        Mutation::Replace(index, replacement) => {
            // The root itself is replaced only when it has no children.
            let root = !(value.is_object() || value.is_array());
            if let Some(node) = pick(value, index, root, |_| true) {
                *node = replacement.clone();
            }
        }
        Mutation::Delete(index, key) => {
            let non_empty = |v: &Value| v.as_object().is_some_and(|m| !m.is_empty());
            if let Some(Value::Object(map)) = pick(value, index, true, non_empty) {
                let key = map.keys().nth(key.index(map.len())).cloned();
                if let Some(key) = key {
                    map.remove(&key);
                }
            }
        }
        Mutation::EditString(index, at, c) => {
            if let Some(Value::String(s)) = pick(value, index, true, Value::is_string) {
                let boundaries: Vec<usize> = s
                    .char_indices()
                    .map(|(i, _)| i)
                    .chain(std::iter::once(s.len()))
                    .collect();
                s.insert(boundaries[at.index(boundaries.len())], *c);
            }
        }
        Mutation::DuplicateItem(index) => {
            let non_empty = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty());
            if let Some(Value::Array(items)) = pick(value, index, true, non_empty) {
                let item = items[index.index(items.len())].clone();
                items.push(item);
            }
        }
    }
}
fn render(mut value: Value, plan: &BodyPlan) -> Vec<u8> {
    for mutation in &plan.mutations {
        apply(&mut value, mutation);
    }
    let mut body = if plan.pretty {
        serde_json::to_vec_pretty(&value).unwrap()
    } else {
        serde_json::to_vec(&value).unwrap()
    };
    if let Some(cut) = &plan.truncate {
        body.truncate(cut.index(body.len() + 1));
    }
    body
}

/// Cuts at a char boundary at or before the byte position, for `&str` APIs.
fn utf8_body(bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).unwrap()
        }
    }
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

/// What every event handed to the sink must satisfy.
fn check_event(event: &RegistryEvent, source: &str, input: &dyn std::fmt::Debug) {
    let context = || format!("event {event:?} from input {input:?}");
    assert!(!event.registry.is_empty(), "empty registry: {}", context());
    assert!(
        !event.repository.is_empty(),
        "empty repository: {}",
        context()
    );
    assert_eq!(event.source, source, "{}", context());
    if let Some(tag) = &event.tag {
        assert!(is_valid_tag(tag), "invalid tag: {}", context());
    }
    if let Some(digest) = &event.digest {
        assert!(is_valid_digest(digest), "invalid digest: {}", context());
    }
    // Normal form: the event names the repository exactly as a watch on it would.
    let again = RepositoryRef::parse(&format!("{}/{}", event.registry, event.repository))
        .unwrap_or_else(|e| panic!("not a repository reference ({e}): {}", context()));
    assert_eq!(
        (again.registry.as_str(), again.path.as_str()),
        (event.registry.as_str(), event.repository.as_str()),
        "not in normal form: {}",
        context()
    );
}

fn options_for(host: Option<String>) -> ParseOptions {
    ParseOptions {
        distribution_host: host,
    }
}

/// Runs every provider's parser on `body` and checks what comes back.
fn check_all_providers(body: &[u8], options: &ParseOptions) {
    for provider in Provider::ALL {
        check_provider(provider, body, options);
    }
}

fn check_provider(
    provider: Provider,
    body: &[u8],
    options: &ParseOptions,
) -> Option<payloads::Parsed> {
    let input = String::from_utf8_lossy(body);
    match payloads::parse(provider, body, options) {
        Ok(parsed) => {
            for (i, event) in parsed.events.iter().enumerate() {
                check_event(event, provider.name(), &(provider, &input, options));
                assert!(
                    !parsed.events[..i].contains(event),
                    "duplicate event {event:?} from {provider} body {input:?}"
                );
            }
            Some(parsed)
        }
        Err(error) => {
            // Errors render without panicking, too (they end up in logs).
            let _ = error.to_string();
            None
        }
    }
}

fn check_eventbridge(body: &str, default_account: Option<&str>) {
    match eventbridge::parse_message(body, default_account) {
        Ok(Some(event)) => {
            check_event(&event, EVENT_SOURCE, &(body, default_account));
            assert!(
                is_ecr_host(&event.registry).is_some(),
                "not an ECR host: {event:?} from {body:?}"
            );
        }
        Ok(None) => {}
        Err(error) => {
            let _ = error.to_string();
        }
    }
}

#[test]
fn unmutated_fixtures_parse() {
    for fixture in FIXTURES.iter() {
        let body = serde_json::to_vec(&fixture.value).unwrap();
        let parsed = check_provider(fixture.provider, &body, &ParseOptions::default())
            .unwrap_or_else(|| panic!("{} does not parse", fixture.name));
        assert!(
            !parsed.events.is_empty() || parsed.ignored > 0,
            "{} says nothing",
            fixture.name
        );
    }
    check_eventbridge(&ecr_push_event().to_string(), None);
    assert!(
        eventbridge::parse_message(&ecr_push_event().to_string(), None)
            .unwrap()
            .is_some()
    );
    let wrapped = sns_envelope(ecr_push_event().to_string()).to_string();
    assert!(
        eventbridge::parse_message(&wrapped, None)
            .unwrap()
            .is_some()
    );
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn webhook_parsers_survive_arbitrary_bytes(
        body in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..512),
            "[\\[\\]{}\":,0-9a-z \\\\]{0,200}".prop_map(String::into_bytes),
        ],
        host in prop::option::of(interesting_string()),
    ) {
        check_all_providers(&body, &options_for(host));
    }

    #[test]
    fn webhook_parsers_survive_arbitrary_json(
        value in keyed_json(),
        host in prop::option::weighted(0.2, interesting_string()),
    ) {
        let body = serde_json::to_vec(&value).unwrap();
        check_all_providers(&body, &options_for(host));
    }

    #[test]
    fn webhook_parsers_survive_mutated_fixtures(
        fixture in any::<Index>(),
        plan in body_plan(),
        host in prop::option::weighted(0.2, interesting_string()),
    ) {
        let fixture = &FIXTURES[fixture.index(FIXTURES.len())];
        let body = render(fixture.value.clone(), &plan);
        let options = options_for(host);
        // The fixture's own parser goes deepest; the others see a foreign shape.
        check_provider(fixture.provider, &body, &options);
        check_all_providers(&body, &options);
    }

    #[test]
    fn eventbridge_survives_arbitrary_text(
        body in prop_oneof![
            any::<String>(),
            "[\\[\\]{}\":,0-9a-zA-Z \\\\-]{0,200}",
        ],
        account in prop::option::of(interesting_string()),
    ) {
        check_eventbridge(&body, account.as_deref());
    }

    #[test]
    fn eventbridge_survives_arbitrary_json(
        value in keyed_json(),
        account in prop::option::weighted(0.3, interesting_string()),
    ) {
        check_eventbridge(&value.to_string(), account.as_deref());
        let wrapped = sns_envelope(value.to_string()).to_string();
        check_eventbridge(&wrapped, account.as_deref());
    }

    #[test]
    fn eventbridge_survives_mutated_events(
        plan in body_plan(),
        envelope in prop::option::of(body_plan()),
        account in prop::option::weighted(0.3, interesting_string()),
    ) {
        let inner = utf8_body(render(ecr_push_event(), &plan));
        let body = match &envelope {
            // Mutate the event, wrap it in SNS, then mutate the envelope too.
            Some(outer) => utf8_body(render(sns_envelope(inner), outer)),
            None => inner,
        };
        check_eventbridge(&body, account.as_deref());
    }
}
