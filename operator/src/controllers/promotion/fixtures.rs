//! Fixtures of the PromotionPolicy controller's tests: a policy, a candidate, an outcome, a
//! pull request, times and conditions.

use imagewatch_engine::status::promotion::{Delivery, Outcome};

use imagewatch_crd::{PromotionPolicy, PromotionPolicyStatus, promotion::PromotionMode};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::json;

use crate::{forge::PullRequest, promotion::Candidate};

#[cfg(test)]
use crate::promotion::GateReport;

use crate::promotion::{CandidateImage, Origin};
use imagewatch_crd::PromotionPolicySpec;

pub(crate) fn policy(extra: serde_json::Value) -> PromotionPolicy {
    let mut spec = json!({
        "from": {"watchSelector": {"matchLabels": {"stage": "stg"}}},
        "to": {"path": "overlays/production", "branch": "release"},
        "pullRequest": {"provider": "github"},
    });
    if let (Some(base), Some(more)) = (spec.as_object_mut(), extra.as_object()) {
        for (k, v) in more {
            base.insert(k.clone(), v.clone());
        }
    }
    let spec: PromotionPolicySpec = serde_json::from_value(spec).unwrap();
    let mut p = PromotionPolicy::new("my-api", spec);
    p.metadata.namespace = Some("team".into());
    p.metadata.generation = Some(2);
    p
}

pub(crate) fn candidate(current: &str) -> Candidate {
    Candidate {
        images: vec![CandidateImage {
            name: "my-api".into(),
            repository: "r/acct222/my-api".into(),
            tag: "v2".into(),
            digest: None,
            origin: Origin::Source,
            source: Some("r/acct111/my-api:v2".into()),
            current: vec![format!("r/acct222/my-api:{current}")],
        }],
        not_in_target: vec![],
        pinned: false,
        held: vec![],
    }
}

pub(crate) fn outcome(delivery: Delivery, gates: Option<GateReport>, current: &str) -> Outcome {
    Outcome {
        source: "ImageWatches stage=stg".into(),
        mode: PromotionMode::PullRequest,
        path: "overlays/production".into(),
        branch: "release".into(),
        candidate: candidate(current),
        gates,
        delivery,
        warnings: vec![],
        on_git_change: Default::default(),
        name: "my-api".into(),
    }
}

pub(crate) fn pr(number: i64) -> PullRequest {
    PullRequest {
        number,
        url: format!("https://github.test/o/r/pull/{number}"),
        title: "t".into(),
        body: "b".into(),
        head: "imagewatch/promote-team-my-api".into(),
        base: "release".into(),
        head_sha: None,
        labels: vec![],
        auto_merge: false,
        node_id: None,
        state: Default::default(),
    }
}

pub(crate) fn t(secs: i64) -> Time {
    Time(jiff::Timestamp::from_second(secs).unwrap())
}

pub(crate) fn cond<'a>(s: &'a PromotionPolicyStatus, type_: &str) -> &'a Condition {
    s.conditions.iter().find(|c| c.type_ == type_).unwrap()
}
