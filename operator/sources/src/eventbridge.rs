//! Amazon ECR push events, as EventBridge delivers them to an SQS queue.
//!
//! ECR publishes an `"ECR Image Action"` event (`source: "aws.ecr"`) for every push and
//! delete. An EventBridge rule with the queue as target puts the event JSON into the
//! message body; when the event goes through SNS first, the body is an SNS notification
//! whose `Message` is the event as a string (unless raw message delivery is on, in which case
//! the body is the event itself). Both forms are accepted:
//!
//! ```json
//! {"version": "0", "detail-type": "ECR Image Action", "source": "aws.ecr",
//!  "account": "123456789012", "region": "us-west-2", "time": "2019-11-16T01:54:34Z",
//!  "detail": {"result": "SUCCESS", "action-type": "PUSH", "repository-name": "team/app",
//!             "image-tag": "v1.2.3", "image-digest": "sha256:…"}}
//! ```
//!
//! [`parse_message`] turns a successful push into a [`RegistryEvent`] for the registry host
//! `<account>.dkr.ecr.<region>.amazonaws.com`; deletes, failed actions and other events that
//! share the queue are `Ok(None)` (nothing to do, but not an error); bodies that cannot be
//! understood are an [`EventError`].
//!
//! The tag and digest are hints only (the rescan asks ECR), so an event whose tag or digest
//! is not valid still triggers a rescan, without them. An event without `account` (moto
//! omits it; hand-made test events may too) takes the configured default account.

use serde_json::Value;

use super::RegistryEvent;
use imagewatch_registry::{RepositoryRef, is_ecr_host, is_valid_digest, is_valid_tag};

/// `detail-type` of ECR image push/delete events.
pub const ECR_DETAIL_TYPE: &str = "ECR Image Action";
/// `source` of ECR events.
pub const ECR_SOURCE: &str = "aws.ecr";
/// [`RegistryEvent::source`] of events that came through SQS.
pub const EVENT_SOURCE: &str = "sqs";

/// Why a queue message could not be understood. Messages quote what was wrong, for logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventError {
    /// The body (or an SNS notification's `Message`) is not JSON.
    #[error("message body is not JSON: {0}")]
    NotJson(String),
    /// JSON, but neither an EventBridge event nor an SNS notification.
    #[error("message is neither an EventBridge event nor an SNS notification: {0}")]
    NotAnEvent(String),
    /// An ECR event without a field it needs.
    #[error("ECR event has no {0:?}")]
    Missing(&'static str),
    /// An ECR event with a field that cannot be used.
    #[error("ECR event field {field:?} is invalid: {value:?}")]
    Invalid { field: &'static str, value: String },
    /// The event names no account and no default account is configured.
    #[error(
        "ECR event has no \"account\" and no default account is configured to build the registry host"
    )]
    NoAccount,
}

/// The registry host ECR uses for `account` in `region` (China regions use `amazonaws.com.cn`).
pub fn ecr_registry_host(account: &str, region: &str) -> String {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("{account}.dkr.ecr.{region}.{suffix}")
}

/// Parses one SQS message body (an EventBridge event, or an SNS notification carrying one).
/// `Ok(None)` for events that ask for nothing (deletes, failures, other event types).
pub fn parse_message(
    body: &str,
    default_account: Option<&str>,
) -> Result<Option<RegistryEvent>, EventError> {
    let value: Value =
        serde_json::from_str(body).map_err(|e| EventError::NotJson(e.to_string()))?;
    match value.get("Type").and_then(Value::as_str) {
        Some("Notification") => {
            let inner = value
                .get("Message")
                .and_then(Value::as_str)
                .ok_or(EventError::Missing("Message"))?;
            let inner: Value =
                serde_json::from_str(inner).map_err(|e| EventError::NotJson(e.to_string()))?;
            parse_event(&inner, default_account)
        }
        // SNS subscription handshakes reach a queue subscribed by hand; nothing to do.
        Some("SubscriptionConfirmation" | "UnsubscribeConfirmation") => Ok(None),
        _ => parse_event(&value, default_account),
    }
}

/// Parses an EventBridge event already decoded from JSON; see [`parse_message`].
pub fn parse_event(
    event: &Value,
    default_account: Option<&str>,
) -> Result<Option<RegistryEvent>, EventError> {
    let (Some(detail_type), Some(source)) = (
        event.get("detail-type").and_then(Value::as_str),
        event.get("source").and_then(Value::as_str),
    ) else {
        return Err(EventError::NotAnEvent(describe(event)));
    };
    if detail_type != ECR_DETAIL_TYPE || source != ECR_SOURCE {
        tracing::debug!(
            detail_type,
            source,
            "ignoring an event that is not an ECR image action"
        );
        return Ok(None);
    }
    let detail = event
        .get("detail")
        .filter(|d| d.is_object())
        .ok_or(EventError::Missing("detail"))?;
    let field = |name: &'static str| detail.get(name).and_then(Value::as_str);

    let action = field("action-type").ok_or(EventError::Missing("action-type"))?;
    let result = field("result").ok_or(EventError::Missing("result"))?;
    if !action.eq_ignore_ascii_case("PUSH") || !result.eq_ignore_ascii_case("SUCCESS") {
        tracing::debug!(
            action,
            result,
            "ignoring an ECR event that is not a successful push"
        );
        return Ok(None);
    }

    let repository = field("repository-name").ok_or(EventError::Missing("repository-name"))?;
    let region = event
        .get("region")
        .and_then(Value::as_str)
        .ok_or(EventError::Missing("region"))?;
    let account = match event.get("account").and_then(Value::as_str) {
        Some(account) if !account.is_empty() => account,
        _ => default_account.ok_or(EventError::NoAccount)?,
    };
    let registry = ecr_registry_host(account, region);
    if is_ecr_host(&registry).is_none() {
        return Err(EventError::Invalid {
            field: "account/region",
            value: format!("{account}/{region}"),
        });
    }
    let parsed = RepositoryRef::parse(&format!("{registry}/{repository}")).map_err(|_| {
        EventError::Invalid {
            field: "repository-name",
            value: repository.to_string(),
        }
    })?;

    let tag = field("image-tag").filter(|t| !t.is_empty());
    let digest = field("image-digest").filter(|d| !d.is_empty());
    if let Some(tag) = tag.filter(|t| !is_valid_tag(t)) {
        tracing::debug!(
            tag,
            "ECR event carries an invalid tag; rescanning without it"
        );
    }
    if let Some(digest) = digest.filter(|d| !is_valid_digest(d)) {
        tracing::debug!(
            digest,
            "ECR event carries an invalid digest; rescanning without it"
        );
    }
    Ok(Some(RegistryEvent {
        registry: parsed.registry,
        repository: parsed.path,
        tag: tag.filter(|t| is_valid_tag(t)).map(str::to_string),
        digest: digest.filter(|d| is_valid_digest(d)).map(str::to_string),
        source: EVENT_SOURCE,
        at: None,
    }))
}

/// A short description of an unexpected JSON value for error messages.
fn describe(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let keys: Vec<&str> = map.keys().map(String::as_str).take(8).collect();
            format!("object with keys {keys:?}")
        }
        Value::Array(_) => "an array".into(),
        Value::String(_) => "a string".into(),
        Value::Number(_) => "a number".into(),
        Value::Bool(_) => "a boolean".into(),
        Value::Null => "null".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:7f5b2640fe6fb4f46592dfd3410c4a79dac4f89e4782432e0378abcd12345678";

    /// The shape of the example in the ECR user guide ("Amazon ECR events and EventBridge").
    fn push_event() -> Value {
        serde_json::json!({
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
                "repository-name": "my-repository-name",
                "image-digest": DIGEST,
                "action-type": "PUSH",
                "image-tag": "latest"
            }
        })
    }

    fn parse(value: &Value) -> Result<Option<RegistryEvent>, EventError> {
        parse_message(&value.to_string(), None)
    }

    #[test]
    fn push_event_becomes_registry_event() {
        assert_eq!(
            parse(&push_event()).unwrap(),
            Some(RegistryEvent {
                registry: "123456789012.dkr.ecr.us-west-2.amazonaws.com".into(),
                repository: "my-repository-name".into(),
                tag: Some("latest".into()),
                digest: Some(DIGEST.into()),
                source: "sqs",
                at: None,
            })
        );
    }

    #[test]
    fn nested_repository_and_china_region() {
        let mut event = push_event();
        event["region"] = "cn-north-1".into();
        event["detail"]["repository-name"] = "team/billing/api".into();
        let parsed = parse(&event).unwrap().unwrap();
        assert_eq!(
            parsed.registry,
            "123456789012.dkr.ecr.cn-north-1.amazonaws.com.cn"
        );
        assert_eq!(parsed.repository, "team/billing/api");
    }

    #[test]
    fn sns_wrapped_event() {
        let body = serde_json::json!({
            "Type": "Notification",
            "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
            "TopicArn": "arn:aws:sns:us-west-2:123456789012:ecr-events",
            "Message": push_event().to_string(),
            "Timestamp": "2019-11-16T01:54:35.000Z",
            "SignatureVersion": "1",
        });
        let parsed = parse(&body).unwrap().unwrap();
        assert_eq!(parsed.repository, "my-repository-name");
        assert_eq!(parsed.tag.as_deref(), Some("latest"));

        let confirmation =
            serde_json::json!({"Type": "SubscriptionConfirmation", "Message": "You have chosen…"});
        assert_eq!(parse(&confirmation).unwrap(), None);

        let broken = serde_json::json!({"Type": "Notification", "Message": "{not json"});
        assert!(matches!(parse(&broken), Err(EventError::NotJson(_))));
        let missing = serde_json::json!({"Type": "Notification"});
        assert_eq!(parse(&missing), Err(EventError::Missing("Message")));
    }

    #[test]
    fn missing_account_uses_default() {
        let mut event = push_event();
        event.as_object_mut().unwrap().remove("account");
        assert_eq!(parse(&event), Err(EventError::NoAccount));
        let parsed = parse_message(&event.to_string(), Some("210987654321"))
            .unwrap()
            .unwrap();
        assert_eq!(
            parsed.registry,
            "210987654321.dkr.ecr.us-west-2.amazonaws.com"
        );
        // The event's own account wins over the default.
        let parsed = parse_message(&push_event().to_string(), Some("210987654321"))
            .unwrap()
            .unwrap();
        assert!(parsed.registry.starts_with("123456789012."));
    }

    #[test]
    fn ignored_events() {
        let mut delete = push_event();
        delete["detail"]["action-type"] = "DELETE".into();
        assert_eq!(parse(&delete).unwrap(), None);

        let mut failed = push_event();
        failed["detail"]["result"] = "FAILURE".into();
        assert_eq!(parse(&failed).unwrap(), None);

        let scan = serde_json::json!({
            "detail-type": "ECR Image Scan", "source": "aws.ecr", "account": "123456789012",
            "region": "us-west-2", "detail": {"scan-status": "COMPLETE"}
        });
        assert_eq!(parse(&scan).unwrap(), None);

        let other = serde_json::json!({"detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2", "detail": {}});
        assert_eq!(parse(&other).unwrap(), None);
    }

    #[test]
    fn push_without_tag_or_with_odd_hints() {
        let mut by_digest = push_event();
        by_digest["detail"]
            .as_object_mut()
            .unwrap()
            .remove("image-tag");
        let parsed = parse(&by_digest).unwrap().unwrap();
        assert_eq!((parsed.tag, parsed.digest.as_deref()), (None, Some(DIGEST)));

        let mut odd = push_event();
        odd["detail"]["image-tag"] = "bad tag".into();
        // The documentation example shortens digests; such a digest is dropped, not fatal.
        odd["detail"]["image-digest"] = "sha256:7f5b2640fe6fb4f4".into();
        let parsed = parse(&odd).unwrap().unwrap();
        assert_eq!((parsed.tag, parsed.digest), (None, None));
        assert_eq!(parsed.repository, "my-repository-name");
    }

    #[test]
    fn malformed_messages() {
        assert!(matches!(
            parse_message("not json", None),
            Err(EventError::NotJson(_))
        ));
        assert!(matches!(
            parse_message(r#"{"Event":"s3:TestEvent"}"#, None),
            Err(EventError::NotAnEvent(_))
        ));
        assert!(matches!(
            parse_message("[1,2]", None),
            Err(EventError::NotAnEvent(_))
        ));

        for (field, expected) in [
            ("repository-name", EventError::Missing("repository-name")),
            ("action-type", EventError::Missing("action-type")),
            ("result", EventError::Missing("result")),
        ] {
            let mut event = push_event();
            event["detail"].as_object_mut().unwrap().remove(field);
            assert_eq!(parse(&event), Err(expected));
        }
        let mut event = push_event();
        event.as_object_mut().unwrap().remove("detail");
        assert_eq!(parse(&event), Err(EventError::Missing("detail")));
        let mut event = push_event();
        event.as_object_mut().unwrap().remove("region");
        assert_eq!(parse(&event), Err(EventError::Missing("region")));

        let mut event = push_event();
        event["detail"]["repository-name"] = "Bad/Name".into();
        assert!(matches!(
            parse(&event),
            Err(EventError::Invalid {
                field: "repository-name",
                ..
            })
        ));
        let mut event = push_event();
        event["account"] = "12345".into();
        assert!(matches!(
            parse(&event),
            Err(EventError::Invalid {
                field: "account/region",
                ..
            })
        ));
        let mut event = push_event();
        event["region"] = "us west".into();
        assert!(matches!(parse(&event), Err(EventError::Invalid { .. })));
    }

    /// What moto's EventBridge puts into the queue (no `account`; see the moto tests of the
    /// SQS consumer for the live version).
    #[test]
    fn moto_shape() {
        let body = r#"{"id": "a2c55da8-3b5f-4e4e-a553-e935277182bd", "time": "2026-11-29T22:56:43Z", "version": "0", "detail-type": "ECR Image Action", "source": "aws.ecr", "region": "us-east-1", "resources": [], "detail": {"result": "SUCCESS", "repository-name": "probe4424", "image-digest": "sha256:38982815376fcf26c8f4080c918cfdfc4cf482e6d03b0c4b71be77fd2289c8fc", "action-type": "PUSH", "image-tag": "v1"}}"#;
        let parsed = parse_message(body, Some("123456789012")).unwrap().unwrap();
        assert_eq!(
            parsed,
            RegistryEvent {
                registry: "123456789012.dkr.ecr.us-east-1.amazonaws.com".into(),
                repository: "probe4424".into(),
                tag: Some("v1".into()),
                digest: Some(
                    "sha256:38982815376fcf26c8f4080c918cfdfc4cf482e6d03b0c4b71be77fd2289c8fc"
                        .into()
                ),
                source: "sqs",
                at: None,
            }
        );
    }
}
