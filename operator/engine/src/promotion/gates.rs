//! Gates: pure evaluation of the facts the controller gathered (registry HEADs, source watch
//! times, the Argo CD Application, the approval annotation) into `status.gates` and the
//! `GatesPassing` reason.
//!
//! | gate | passes when | failing reason |
//! |---|---|---|
//! | `imageExists` | every changed reference (after rewrite) answers a manifest HEAD in its registry, with the digest the source runs when it pins one | `ImageMissing` |
//! | `soak` | every source has applied its tag at least `soak` ago | `Soaking` |
//! | `application` | the Application is `Synced` and `Healthy`, at a revision that is (or descends from) every source commit | `ApplicationNotHealthy` |
//! | `approval` | the annotation `imagewatch.dev/approve` equals the candidate id (or summary) | `AwaitingApproval` |
//! | `signature` | every changed reference's image (in its target registry) has a cosign signature by a trusted key | `SignatureMissing`, `SignatureInvalid` |
//!
//! A pinned candidate (a rollback) skips `soak` and `application`: the pinned tags ran
//! before, and what staging runs now says nothing about them. Gates are reported in the order
//! of the table; the first failing one names the reason.

use std::time::Duration;

use imagewatch_crd::conditions::reason::{SIGNATURE_INVALID, SIGNATURE_MISSING};
use imagewatch_crd::promotion::{GateStatus, gate, reason};

/// What a manifest HEAD found for one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageCheck {
    /// The manifest exists (with this digest).
    Exists(Option<String>),
    /// 404 (manifest or repository).
    Missing,
    /// The registry could not be asked.
    Error(String),
}

/// One `imageExists` fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFact {
    /// `repository:tag` checked.
    pub reference: String,
    /// Digest the source runs, when it pins one.
    pub expected_digest: Option<String>,
    /// What the registry said.
    pub check: ImageCheck,
}

/// What checking one reference's signature found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCheck {
    /// A signature verified.
    Verified,
    /// No signature exists.
    Missing,
    /// Signatures exist; none verifies (why).
    Invalid(String),
    /// The image or its signatures could not be read.
    Error(String),
}

/// One `signature` fact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureFact {
    /// `repository:tag` checked.
    pub reference: String,
    /// What was found.
    pub check: SignatureCheck,
}

/// `soak` facts: when each source applied its tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoakFacts {
    /// Required soak.
    pub required: Duration,
    /// `(source, applied at)`; `None` when the source does not say.
    pub applied: Vec<(String, Option<jiff::Timestamp>)>,
}

/// Whether the Application's revision holds the source commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Containment {
    /// It is, or descends from, every source commit.
    Contains,
    /// It does not hold this source commit (yet).
    Lacks(String),
    /// Cannot tell (message says why).
    Unknown(String),
}

/// `application` facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplicationFacts {
    /// `namespace/name`.
    pub name: String,
    /// The Application exists.
    pub found: bool,
    /// `status.sync.status`.
    pub sync: Option<String>,
    /// `status.health.status`.
    pub health: Option<String>,
    /// The revision it is synced to.
    pub revision: Option<String>,
    /// Whether that revision holds the candidate.
    pub containment: Containment,
}

/// `approval` facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalFacts {
    /// The annotation's value.
    pub annotation: Option<String>,
    /// `status.candidateId`.
    pub id: String,
    /// `status.candidateSummary`.
    pub summary: String,
    /// The policy's namespace and name, for the command the message gives.
    pub namespace: String,
    pub name: String,
}

/// Everything the gates look at; `None` for a gate that is not configured.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateFacts {
    /// `imageExists`.
    pub image_exists: Option<Vec<ImageFact>>,
    /// `soak`.
    pub soak: Option<SoakFacts>,
    /// `application`.
    pub application: Option<ApplicationFacts>,
    /// `approval`.
    pub approval: Option<ApprovalFacts>,
    /// `signature`.
    pub signature: Option<Vec<SignatureFact>>,
    /// The candidate comes from `spec.pin` (a rollback).
    pub pinned: bool,
}

/// The evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GateReport {
    /// One entry per configured gate, in order.
    pub gates: Vec<GateStatus>,
    /// The first failing gate: `(GatesPassing reason, message)`.
    pub failing: Option<(&'static str, String)>,
    /// When a time-based gate (soak) will pass, if nothing else changes.
    pub recheck_in: Option<Duration>,
}

impl GateReport {
    /// Whether every gate passes.
    pub fn passed(&self) -> bool {
        self.failing.is_none()
    }

    /// `passed/total`.
    pub fn summary(&self) -> String {
        format!(
            "{}/{}",
            self.gates.iter().filter(|g| g.passed).count(),
            self.gates.len()
        )
    }
}

fn status(name: &str, passed: bool, message: String) -> GateStatus {
    GateStatus {
        name: name.to_string(),
        passed,
        message: Some(message),
    }
}

/// Evaluates the gates at `now`.
pub fn evaluate(facts: &GateFacts, now: jiff::Timestamp) -> GateReport {
    let mut report = GateReport::default();
    let push = |report: &mut GateReport, s: GateStatus, reason: &'static str| {
        if !s.passed && report.failing.is_none() {
            report.failing = Some((
                reason,
                format!("{}: {}", s.name, s.message.clone().unwrap_or_default()),
            ));
        }
        report.gates.push(s);
    };

    if let Some(images) = &facts.image_exists {
        let mut missing = Vec::new();
        let mut errors = Vec::new();
        for fact in images {
            match &fact.check {
                ImageCheck::Exists(found) => {
                    if let (Some(expected), Some(found)) = (&fact.expected_digest, found)
                        && expected != found
                    {
                        missing.push(format!(
                            "{} (has {found}, the source runs {expected})",
                            fact.reference
                        ));
                    }
                }
                ImageCheck::Missing => missing.push(fact.reference.clone()),
                ImageCheck::Error(e) => errors.push(format!("{}: {e}", fact.reference)),
            }
        }
        let s = if !missing.is_empty() {
            status(
                gate::IMAGE_EXISTS,
                false,
                format!("not in the registry: {}", missing.join(", ")),
            )
        } else if !errors.is_empty() {
            status(
                gate::IMAGE_EXISTS,
                false,
                format!("cannot check: {}", errors.join("; ")),
            )
        } else {
            status(
                gate::IMAGE_EXISTS,
                true,
                format!("{} image(s) exist", images.len()),
            )
        };
        let reason = if missing.is_empty() && !errors.is_empty() {
            reason::GATE_ERROR
        } else {
            reason::IMAGE_MISSING
        };
        push(&mut report, s, reason);
    }

    if let Some(soak) = &facts.soak {
        let s = if facts.pinned {
            status(gate::SOAK, true, "skipped for spec.pin (a rollback)".into())
        } else {
            let mut waiting: Vec<String> = Vec::new();
            let mut longest = Duration::ZERO;
            for (source, at) in &soak.applied {
                match at {
                    None => waiting.push(format!("{source} has no applied time")),
                    Some(at) => {
                        let ran = now.duration_since(*at).try_into().unwrap_or(Duration::ZERO);
                        if ran < soak.required {
                            let left = soak.required - ran;
                            longest = longest.max(left);
                            waiting.push(format!(
                                "{source} applied {} ago, {} to go",
                                human(ran),
                                human(left)
                            ));
                        }
                    }
                }
            }
            if waiting.is_empty() {
                status(
                    gate::SOAK,
                    true,
                    format!("every source ran it for at least {}", human(soak.required)),
                )
            } else {
                if longest > Duration::ZERO {
                    report.recheck_in = Some(longest);
                }
                status(gate::SOAK, false, waiting.join("; "))
            }
        };
        push(&mut report, s, reason::SOAKING);
    }

    if let Some(app) = &facts.application {
        let s = if facts.pinned {
            status(
                gate::APPLICATION,
                true,
                "skipped for spec.pin (a rollback)".into(),
            )
        } else if !app.found {
            status(
                gate::APPLICATION,
                false,
                format!(
                    "Application {} does not exist or does not deploy to this namespace",
                    app.name
                ),
            )
        } else {
            let sync = app.sync.as_deref().unwrap_or("Unknown");
            let health = app.health.as_deref().unwrap_or("Unknown");
            let revision = app.revision.as_deref().unwrap_or("?");
            let short = revision.get(..12).unwrap_or(revision);
            if sync != "Synced" || health != "Healthy" {
                status(
                    gate::APPLICATION,
                    false,
                    format!("{} is {sync}/{health} at {short}", app.name),
                )
            } else {
                match &app.containment {
                    Containment::Contains => status(
                        gate::APPLICATION,
                        true,
                        format!("{} is Synced/Healthy at {short}", app.name),
                    ),
                    Containment::Lacks(commit) => status(
                        gate::APPLICATION,
                        false,
                        format!(
                            "{} is Synced/Healthy at {short}, which does not contain {}",
                            app.name,
                            commit.get(..12).unwrap_or(commit)
                        ),
                    ),
                    Containment::Unknown(why) => status(
                        gate::APPLICATION,
                        false,
                        format!("{} is Synced/Healthy at {short}, but {why}", app.name),
                    ),
                }
            }
        };
        push(&mut report, s, reason::APPLICATION_NOT_HEALTHY);
    }

    if let Some(approval) = &facts.approval {
        let value = approval.annotation.as_deref().map(str::trim);
        let s = match value {
            Some(v) if v == approval.id || (!v.is_empty() && v == approval.summary) => {
                status(gate::APPROVAL, true, format!("approved ({})", approval.id))
            }
            Some(v) if !v.is_empty() => status(
                gate::APPROVAL,
                false,
                format!(
                    "the approval {v:?} is for another candidate; approve this one with imagewatch.dev/approve={}",
                    approval.id
                ),
            ),
            _ => status(
                gate::APPROVAL,
                false,
                format!(
                    "approve with: kubectl annotate promotionpolicy -n {} {} imagewatch.dev/approve={} --overwrite",
                    approval.namespace, approval.name, approval.id
                ),
            ),
        };
        push(&mut report, s, reason::AWAITING_APPROVAL);
    }

    if let Some(signatures) = &facts.signature {
        let (mut missing, mut invalid, mut errors) = (Vec::new(), Vec::new(), Vec::new());
        for fact in signatures {
            match &fact.check {
                SignatureCheck::Verified => {}
                SignatureCheck::Missing => missing.push(fact.reference.clone()),
                SignatureCheck::Invalid(why) => invalid.push(format!("{}: {why}", fact.reference)),
                SignatureCheck::Error(e) => errors.push(format!("{}: {e}", fact.reference)),
            }
        }
        let (s, why) = if !invalid.is_empty() {
            (
                status(
                    gate::SIGNATURE,
                    false,
                    format!("signature does not verify: {}", invalid.join("; ")),
                ),
                SIGNATURE_INVALID,
            )
        } else if !missing.is_empty() {
            (
                status(
                    gate::SIGNATURE,
                    false,
                    format!("no cosign signature: {}", missing.join(", ")),
                ),
                SIGNATURE_MISSING,
            )
        } else if !errors.is_empty() {
            (
                status(
                    gate::SIGNATURE,
                    false,
                    format!("cannot check: {}", errors.join("; ")),
                ),
                reason::GATE_ERROR,
            )
        } else {
            (
                status(
                    gate::SIGNATURE,
                    true,
                    format!("{} image(s) signed by a trusted key", signatures.len()),
                ),
                SIGNATURE_MISSING,
            )
        };
        push(&mut report, s, why);
    }
    report
}

/// `1h2m`, `5m`, `30s` (also used for windows).
pub use crate::duration::human;

/// `(sync status, health status, revision)` of an Argo CD Application object. The revision
/// is `status.sync.revision`, else the first of `status.sync.revisions` (multi-source), else
/// the last sync operation's.
pub fn application_state(
    app: &serde_json::Value,
) -> (Option<String>, Option<String>, Option<String>) {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let status = app.get("status");
    let sync = text(status.and_then(|s| s.pointer("/sync/status")));
    let health = text(status.and_then(|s| s.pointer("/health/status")));
    let revision = text(status.and_then(|s| s.pointer("/sync/revision")))
        .or_else(|| text(status.and_then(|s| s.pointer("/sync/revisions/0"))))
        .or_else(|| text(status.and_then(|s| s.pointer("/operationState/syncResult/revision"))))
        .or_else(|| text(status.and_then(|s| s.pointer("/operationState/syncResult/revisions/0"))))
        .filter(|r| !r.is_empty());
    (sync, health, revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(secs).unwrap()
    }

    fn all_gates() -> GateFacts {
        GateFacts {
            image_exists: Some(vec![ImageFact {
                reference: "r/acct222/my-api:v2".into(),
                expected_digest: None,
                check: ImageCheck::Exists(Some("sha256:a".into())),
            }]),
            soak: Some(SoakFacts {
                required: Duration::from_secs(1800),
                applied: vec![("ImageWatch ns/my-api".into(), Some(ts(1000)))],
            }),
            application: Some(ApplicationFacts {
                name: "argocd/my-api-stg".into(),
                found: true,
                sync: Some("Synced".into()),
                health: Some("Healthy".into()),
                revision: Some("abcdef0123456789".into()),
                containment: Containment::Contains,
            }),
            approval: Some(ApprovalFacts {
                annotation: Some("0123456789ab".into()),
                id: "0123456789ab".into(),
                summary: "my-api:v2".into(),
                namespace: "team-a".into(),
                name: "my-api".into(),
            }),
            signature: None,
            pinned: false,
        }
    }

    #[test]
    fn everything_passes() {
        let report = evaluate(&all_gates(), ts(1000 + 1800));
        assert!(report.passed(), "{report:?}");
        assert_eq!(report.summary(), "4/4");
        let names: Vec<&str> = report.gates.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["imageExists", "soak", "application", "approval"]);
    }

    #[test]
    fn a_missing_image_is_named_first() {
        let mut facts = all_gates();
        facts.image_exists = Some(vec![ImageFact {
            reference: "r/acct222/my-api:v2".into(),
            expected_digest: None,
            check: ImageCheck::Missing,
        }]);
        let report = evaluate(&facts, ts(1000 + 1800));
        let (reason, message) = report.failing.clone().unwrap();
        assert_eq!(reason, "ImageMissing");
        assert!(message.contains("r/acct222/my-api:v2"), "{message}");
        assert_eq!(report.summary(), "3/4");
    }

    #[test]
    fn a_different_digest_counts_as_missing() {
        let mut facts = all_gates();
        facts.image_exists = Some(vec![ImageFact {
            reference: "r/x:v2".into(),
            expected_digest: Some("sha256:b".into()),
            check: ImageCheck::Exists(Some("sha256:a".into())),
        }]);
        let report = evaluate(&facts, ts(5000));
        assert_eq!(report.failing.unwrap().0, "ImageMissing");
    }

    #[test]
    fn registry_failures_are_gate_errors() {
        let mut facts = all_gates();
        facts.image_exists = Some(vec![ImageFact {
            reference: "r/x:v2".into(),
            expected_digest: None,
            check: ImageCheck::Error("denied".into()),
        }]);
        assert_eq!(evaluate(&facts, ts(5000)).failing.unwrap().0, "GateError");
    }

    #[test]
    fn the_signature_gate_names_unsigned_and_invalid_images() {
        let fact = |reference: &str, check: SignatureCheck| SignatureFact {
            reference: reference.into(),
            check,
        };
        let only = |signature: Vec<SignatureFact>| GateFacts {
            signature: Some(signature),
            ..Default::default()
        };
        let report = evaluate(&only(vec![fact("r/x:v2", SignatureCheck::Verified)]), ts(0));
        assert!(report.passed());
        assert_eq!(report.gates[0].name, "signature");

        let (reason, message) = evaluate(
            &only(vec![
                fact("r/x:v2", SignatureCheck::Verified),
                fact("r/y:v2", SignatureCheck::Missing),
            ]),
            ts(0),
        )
        .failing
        .unwrap();
        assert_eq!(reason, "SignatureMissing");
        assert!(
            message.contains("r/y:v2") && !message.contains("r/x"),
            "{message}"
        );

        let (reason, message) = evaluate(
            &only(vec![
                fact("r/y:v2", SignatureCheck::Missing),
                fact("r/z:v2", SignatureCheck::Invalid("wrong key".into())),
            ]),
            ts(0),
        )
        .failing
        .unwrap();
        assert_eq!(reason, "SignatureInvalid");
        assert!(message.contains("r/z:v2: wrong key"), "{message}");

        let (reason, _) = evaluate(
            &only(vec![fact("r/x:v2", SignatureCheck::Error("denied".into()))]),
            ts(0),
        )
        .failing
        .unwrap();
        assert_eq!(reason, "GateError");
    }

    #[test]
    fn soaking_says_how_long_is_left() {
        let report = evaluate(&all_gates(), ts(1000 + 600));
        let (reason, message) = report.failing.clone().unwrap();
        assert_eq!(reason, "Soaking");
        assert!(message.contains("10m ago, 20m to go"), "{message}");
        assert_eq!(report.recheck_in, Some(Duration::from_secs(1200)));
    }

    #[test]
    fn the_application_must_hold_the_candidate() {
        let mut facts = all_gates();
        if let Some(app) = facts.application.as_mut() {
            app.containment = Containment::Lacks("1234567890abcdef".into());
        }
        let (reason, message) = evaluate(&facts, ts(9000)).failing.unwrap();
        assert_eq!(reason, "ApplicationNotHealthy");
        assert!(
            message.contains("does not contain 1234567890ab"),
            "{message}"
        );
        if let Some(app) = facts.application.as_mut() {
            app.containment = Containment::Contains;
            app.health = Some("Degraded".into());
        }
        let (_, message) = evaluate(&facts, ts(9000)).failing.unwrap();
        assert!(message.contains("Synced/Degraded"), "{message}");
    }

    #[test]
    fn approval_is_for_this_candidate_only() {
        let mut facts = all_gates();
        if let Some(a) = facts.approval.as_mut() {
            a.annotation = Some("ffffffffffff".into());
        }
        let (reason, message) = evaluate(&facts, ts(9000)).failing.unwrap();
        assert_eq!(reason, "AwaitingApproval");
        assert!(message.contains("another candidate"), "{message}");
        if let Some(a) = facts.approval.as_mut() {
            a.annotation = Some("my-api:v2".into());
        }
        assert!(evaluate(&facts, ts(9000)).passed());
        if let Some(a) = facts.approval.as_mut() {
            a.annotation = None;
        }
        let (_, message) = evaluate(&facts, ts(9000)).failing.unwrap();
        assert!(
            message.contains(
                "kubectl annotate promotionpolicy -n team-a my-api imagewatch.dev/approve=0123456789ab --overwrite"
            ),
            "{message}"
        );
    }

    #[test]
    fn a_pin_skips_soak_and_application() {
        let mut facts = all_gates();
        facts.pinned = true;
        if let Some(app) = facts.application.as_mut() {
            app.health = Some("Degraded".into());
        }
        let report = evaluate(&facts, ts(1001));
        assert!(report.passed(), "{report:?}");
    }

    #[test]
    fn unconfigured_gates_are_not_reported() {
        let report = evaluate(&GateFacts::default(), ts(0));
        assert!(report.passed());
        assert_eq!(report.summary(), "0/0");
    }

    #[test]
    fn application_state_reads_every_revision_form() {
        let app = serde_json::json!({"status": {"sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"}}});
        assert_eq!(
            application_state(&app),
            (
                Some("Synced".into()),
                Some("Healthy".into()),
                Some("abc".into())
            )
        );
        let multi =
            serde_json::json!({"status": {"sync": {"status": "Synced", "revisions": ["def"]}}});
        assert_eq!(application_state(&multi).2.as_deref(), Some("def"));
        let op =
            serde_json::json!({"status": {"operationState": {"syncResult": {"revision": "123"}}}});
        assert_eq!(application_state(&op).2.as_deref(), Some("123"));
        assert_eq!(
            application_state(&serde_json::json!({})),
            (None, None, None)
        );
    }

    #[test]
    fn human_durations() {
        assert_eq!(human(Duration::from_secs(0)), "0s");
        assert_eq!(human(Duration::from_secs(3725)), "1h2m5s");
        assert_eq!(human(Duration::from_secs(300)), "5m");
    }
}
