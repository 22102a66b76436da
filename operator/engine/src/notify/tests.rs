//! Happenings found from status changes, and the payloads they become.

use super::*;
use imagewatch_crd::PullRequestState;
use imagewatch_crd::{
    ChangeRecord, FailureNotified, ImageWatchStatus, Notification, NotificationType,
    PromotionPolicyStatus, WatchPullRequest,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

fn at(secs: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn subject() -> Subject {
    Subject {
        kind: "ImageWatch",
        namespace: "shop".into(),
        name: "api".into(),
        repository_web: repository_web("git@git.example.com:shop/manifests.git"),
    }
}

fn destination(name: &str, type_: NotificationType) -> Notification {
    Notification {
        name: name.into(),
        type_,
        secret_ref: imagewatch_crd::SecretRef {
            name: format!("{name}-secret"),
        },
        provider: None,
        api_url: None,
        events: None,
        failing_after: None,
    }
}

fn ready(status: &str, reason: &str, since: i64) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: status.into(),
        reason: reason.into(),
        message: format!("{reason} message"),
        observed_generation: Some(1),
        last_transition_time: Time(at(since)),
    }
}

fn change(tag: &str, commit: &str, secs: i64) -> ChangeRecord {
    ChangeRecord {
        tag: tag.into(),
        image: None,
        digest: None,
        commit: Some(commit.into()),
        pull_request: None,
        time: Time(at(secs)),
        trigger: "Webhook".into(),
        push_to_commit_seconds: Some(0.241),
    }
}

#[test]
fn a_new_history_entry_is_one_committed_message_to_each_destination_that_wants_it() {
    let destinations = [
        destination("slack", NotificationType::Slack),
        destination("status", NotificationType::CommitStatus),
        destination("comment", NotificationType::PullRequestComment),
    ];
    let old = ImageWatchStatus {
        history: vec![change("v1", "c1", 0)],
        conditions: vec![ready("True", "UpToDate", 0)],
        ..Default::default()
    };
    let mut new = ImageWatchStatus {
        history: vec![
            change("v2", "c2abcdef0123456789", 10),
            change("v1", "c1", 0),
        ],
        ..old.clone()
    };
    let out = watch_messages(&subject(), &destinations, Some(&old), &mut new, at(20));
    let to: Vec<(&str, HappeningKind)> = out
        .iter()
        .map(|o| (o.destination.as_str(), o.message.kind))
        .collect();
    // A pull request comment carries no commit.
    assert_eq!(
        to,
        vec![
            ("slack", HappeningKind::Committed),
            ("status", HappeningKind::Committed)
        ]
    );
    let m = &out[0].message;
    assert_eq!(m.id, "committed/c2abcdef0123456789/v2");
    assert_eq!(m.title, "shop/api: v2 committed (was v1)");
    assert_eq!(
        m.link.as_deref(),
        Some("https://git.example.com/shop/manifests/commit/c2abcdef0123456789")
    );
    assert!(m.facts.contains(&("Tag".into(), "v1 → v2".into())));
    assert!(
        m.facts
            .contains(&("Push → commit".into(), "0.241 s".into()))
    );
    // The same status again (a restart, another replica) finds nothing.
    let mut again = new.clone();
    assert!(watch_messages(&subject(), &destinations, Some(&new), &mut again, at(30)).is_empty());
}

#[test]
fn failing_is_sent_once_after_each_destinations_threshold_then_recovered_to_those_told() {
    let mut quick = destination("pager", NotificationType::Webhook);
    quick.failing_after = Some("2m".into());
    let slow = destination("slack", NotificationType::Slack); // 10m by default
    let mut committed_only = destination("quiet", NotificationType::Slack);
    committed_only.events = Some(vec![HappeningKind::Committed]);
    let destinations = [quick, slow, committed_only];
    let mut status = ImageWatchStatus {
        conditions: vec![ready("False", "RegistryError", 0)],
        ..Default::default()
    };
    let names = |out: &[Outgoing]| -> Vec<String> {
        out.iter()
            .map(|o| format!("{}:{:?}", o.destination, o.message.kind))
            .collect()
    };
    let old = status.clone();
    assert!(watch_messages(&subject(), &destinations, Some(&old), &mut status, at(60)).is_empty());
    assert_eq!(
        failing_due(
            &destinations,
            &status.conditions,
            status.failure_notified.as_ref(),
            at(60)
        ),
        Some(Duration::from_secs(60))
    );
    let old = status.clone();
    let out = watch_messages(&subject(), &destinations, Some(&old), &mut status, at(180));
    assert_eq!(names(&out), vec!["pager:Failing"]);
    assert_eq!(
        out[0].message.title,
        "shop/api: failing for 3m — RegistryError"
    );
    assert!(!out[0].message.good);
    let old = status.clone();
    assert!(watch_messages(&subject(), &destinations, Some(&old), &mut status, at(300)).is_empty());
    let old = status.clone();
    let out = watch_messages(&subject(), &destinations, Some(&old), &mut status, at(700));
    assert_eq!(names(&out), vec!["slack:Failing"]);
    assert_eq!(
        status.failure_notified,
        Some(FailureNotified {
            since: Time(at(0)),
            destinations: vec!["pager".into(), "slack".into()]
        })
    );
    // Ready again: each destination told of the failure hears it is over, once.
    let old = status.clone();
    status.conditions = vec![ready("True", "Updated", 800)];
    let out = watch_messages(&subject(), &destinations, Some(&old), &mut status, at(800));
    assert_eq!(names(&out), vec!["pager:Recovered", "slack:Recovered"]);
    assert_eq!(status.failure_notified, None);
    let old = status.clone();
    assert!(watch_messages(&subject(), &destinations, Some(&old), &mut status, at(900)).is_empty());
}

#[test]
fn a_pull_request_is_announced_when_opened_updated_and_merged() {
    let destinations = [destination("comment", NotificationType::PullRequestComment)];
    let pr = |tag: &str, state: PullRequestState| WatchPullRequest {
        number: 7,
        url: "https://git.example.com/shop/manifests/pulls/7".into(),
        state,
        branch: "imagewatch/api".into(),
        tag: Some(tag.into()),
    };
    let mut steps = vec![
        (
            pr("v2", PullRequestState::Open),
            Some("pull-request/7/opened/v2"),
        ),
        (pr("v2", PullRequestState::Open), None),
        (
            pr("v3", PullRequestState::Open),
            Some("pull-request/7/updated/v3"),
        ),
        (
            pr("v3", PullRequestState::Merged),
            Some("pull-request/7/merged/v3"),
        ),
    ]
    .into_iter();
    let mut status = ImageWatchStatus::default();
    for (next, expected) in steps.by_ref() {
        let old = status.clone();
        status.pull_request = Some(next);
        let out = watch_messages(&subject(), &destinations, Some(&old), &mut status, at(1));
        assert_eq!(out.first().map(|o| o.message.id.as_str()), expected);
        if let Some(o) = out.first() {
            let (number, body) = pull_request_comment(&o.message).unwrap();
            assert_eq!(number, 7);
            assert!(body.starts_with("**shop/api: pull request #7 "), "{body}");
        }
    }
}

#[test]
fn a_promotion_announces_waiting_then_approved_for_each_candidate() {
    let destinations = [destination("slack", NotificationType::Slack)];
    let gates = |status: &str| Condition {
        type_: "GatesPassing".into(),
        status: status.into(),
        reason: "x".into(),
        message: String::new(),
        observed_generation: None,
        last_transition_time: Time(at(0)),
    };
    let mut status = PromotionPolicyStatus {
        candidate_id: Some("abc".into()),
        candidate_summary: Some("api:v2".into()),
        gates: vec![imagewatch_crd::promotion::GateStatus {
            name: "soak".into(),
            passed: false,
            message: Some("12m of 30m".into()),
        }],
        conditions: vec![gates("False")],
        ..Default::default()
    };
    let subject = Subject {
        kind: "PromotionPolicy",
        ..subject()
    };
    let out = promotion_messages(&subject, &destinations, None, &mut status, at(1));
    assert_eq!(out[0].message.id, "waiting/abc");
    assert!(
        out[0]
            .message
            .facts
            .contains(&("Gate soak".into(), "waiting: 12m of 30m".into()))
    );
    let old = status.clone();
    assert!(promotion_messages(&subject, &destinations, Some(&old), &mut status, at(2)).is_empty());
    status.conditions = vec![gates("True")];
    status.gates[0].passed = true;
    let out = promotion_messages(&subject, &destinations, Some(&old), &mut status, at(3));
    assert_eq!(out[0].message.id, "approved/abc");
    assert_eq!(
        out[0].message.title,
        "shop/api: promotion approved (api:v2)"
    );
}

#[test]
fn the_payloads_follow_slack_teams_and_the_webhook_shapes() {
    let message = Message {
        kind: HappeningKind::Committed,
        id: "committed/c2/v2".into(),
        title: "shop/api: v2 committed (was v1) <&>".into(),
        facts: vec![
            ("Tag".into(), "v1 → v2".into()),
            (
                "Commit".into(),
                "https://git.example.com/shop/manifests/commit/c2".into(),
            ),
        ],
        link: Some("https://git.example.com/shop/manifests/commit/c2".into()),
        commit: Some("c2".into()),
        pull_request: None,
        good: true,
    };
    let s = slack(&subject(), &message);
    assert_eq!(s["text"], "shop/api: v2 committed (was v1) <&>");
    assert_eq!(s["blocks"][0]["type"], "section");
    assert_eq!(s["blocks"][0]["text"]["type"], "mrkdwn");
    assert_eq!(
        s["blocks"][0]["text"]["text"],
        "*shop/api: v2 committed (was v1) &lt;&amp;&gt;*\n*Tag:* v1 → v2\n*Commit:* <https://git.example.com/shop/manifests/commit/c2>"
    );
    assert_eq!(s["blocks"][1]["type"], "context");
    assert_eq!(
        s["blocks"][1]["elements"][0]["text"],
        "ImageWatch shop/api · committed/c2/v2"
    );

    let t = teams(&subject(), &message);
    assert_eq!(t["type"], "message");
    let attachment = &t["attachments"][0];
    assert_eq!(
        attachment["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert!(attachment["contentUrl"].is_null());
    let card = &attachment["content"];
    assert_eq!(card["type"], "AdaptiveCard");
    assert_eq!(card["version"], "1.4");
    assert_eq!(card["body"][0]["type"], "TextBlock");
    assert_eq!(card["body"][1]["facts"][0]["title"], "Tag");
    assert_eq!(card["actions"][0]["type"], "Action.OpenUrl");

    let w = webhook(&subject(), &message, at(0));
    assert_eq!(w["happening"], "Committed");
    assert_eq!(w["id"], "committed/c2/v2");
    assert_eq!(w["commit"], "c2");
    assert_eq!(
        (w["kind"].as_str(), w["namespace"].as_str()),
        (Some("ImageWatch"), Some("shop"))
    );

    let (commit, description, context) = commit_status(&subject(), &message).unwrap();
    assert_eq!(
        (commit.as_str(), context.as_str()),
        ("c2", "imagewatch/api")
    );
    assert!(description.starts_with("shop/api: v2 committed"));
}

#[test]
fn repository_web_urls_come_from_every_git_url_form() {
    for (url, web) in [
        (
            "https://git.example.com/shop/manifests.git",
            "https://git.example.com/shop/manifests",
        ),
        (
            "https://user:tok@git.example.com/shop/manifests",
            "https://git.example.com/shop/manifests",
        ),
        (
            "ssh://git@git.example.com:22/shop/manifests.git",
            "https://git.example.com/shop/manifests",
        ),
        (
            "git@github.com:shop/manifests.git",
            "https://github.com/shop/manifests",
        ),
    ] {
        assert_eq!(repository_web(url).as_deref(), Some(web), "{url}");
    }
    assert_eq!(
        commit_url("https://gitlab.example.com/g/p", "c"),
        "https://gitlab.example.com/g/p/-/commit/c"
    );
}

#[test]
fn a_promotion_pull_request_is_announced_when_opened_updated_and_merged() {
    use imagewatch_crd::promotion::PullRequestRef;
    let destinations = [destination("comment", NotificationType::PullRequestComment)];
    let subject = Subject {
        kind: "PromotionPolicy",
        ..subject()
    };
    let pr = PullRequestRef {
        url: "https://git.example.com/shop/manifests/pulls/9".into(),
        number: 9,
        branch: "imagewatch/promote".into(),
    };
    let proposed = |commit: &str| ChangeRecord {
        image: Some("api".into()),
        pull_request: Some(pr.url.clone()),
        trigger: "Promotion".into(),
        ..change("v2", commit, 1)
    };
    let ids =
        |out: &[Outgoing]| -> Vec<String> { out.iter().map(|o| o.message.id.clone()).collect() };
    let mut status = PromotionPolicyStatus::default();
    let old = status.clone();
    status.pull_request = Some(pr.clone());
    status.history = vec![proposed("c1")];
    let out = promotion_messages(&subject, &destinations, Some(&old), &mut status, at(1));
    assert_eq!(ids(&out), vec!["pull-request/9/opened"]);
    // A new commit pushed to the same pull request.
    let old = status.clone();
    status.history.insert(0, proposed("c2"));
    let out = promotion_messages(&subject, &destinations, Some(&old), &mut status, at(2));
    assert_eq!(ids(&out), vec!["pull-request/9/updated/c2"]);
    // Merged: gone, and the target holds the candidate.
    let old = status.clone();
    status.pull_request = None;
    status.conditions = vec![ready("True", "UpToDate", 3)];
    let out = promotion_messages(&subject, &destinations, Some(&old), &mut status, at(3));
    assert_eq!(ids(&out), vec!["pull-request/9/merged"]);
    assert_eq!(out[0].message.title, "shop/api: pull request #9 merged ()");
}
