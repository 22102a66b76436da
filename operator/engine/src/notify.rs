//! Notifications (pure): which happenings a reconcile makes, read from the status it leaves
//! against the one it found, and the messages they become for each destination type.
//!
//! A happening is found once: from a change of the status (a new `status.history` entry, a
//! pull request number or state that moved, a condition that turned), so the reconcile that
//! writes the change is the one that notifies, and neither a restart nor another replica
//! finds it again. The one happening that is a matter of time, `Failing`, is recorded in
//! `status.failureNotified` in the same status write. Each message has an id that names the
//! happening (`committed/<commit>/<tag>`, `failing/<since>`, …), sent with it so a receiver
//! can drop a duplicate.

use std::time::Duration;

use imagewatch_crd::conditions::{HELD, READY};
use imagewatch_crd::{
    ChangeRecord, FailureNotified, HappeningKind, ImageWatchStatus, Notification, NotificationType,
    PromotionPolicyStatus, PullRequestState,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value, json};

use crate::values::short;

/// `failingAfter` when a destination does not say.
pub const DEFAULT_FAILING_AFTER: Duration = Duration::from_secs(600);

/// The object a message is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subject {
    /// `ImageWatch` or `PromotionPolicy`.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The web URL of its Git repository (`https://host/org/repo`), for commit links.
    pub repository_web: Option<String>,
}

/// One happening, ready to render.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// What it is.
    pub kind: HappeningKind,
    /// Names the happening; the same happening always has the same id.
    pub id: String,
    /// One line, e.g. `shop/api: canary-v1.1.0 committed (was canary-v1.0.0)`.
    pub title: String,
    /// Label → value lines, in order.
    pub facts: Vec<(String, String)>,
    /// A link to what happened (the commit, the pull request), if any.
    pub link: Option<String>,
    /// The commit it made, for a commit status.
    pub commit: Option<String>,
    /// The pull request it concerns (number), for a comment.
    pub pull_request: Option<i64>,
    /// `success` or `failure`, for a commit status and the message's colour.
    pub good: bool,
}

/// A message for one destination.
#[derive(Clone, Debug, PartialEq)]
pub struct Outgoing {
    /// The destination's name (`spec.notify[].name`).
    pub destination: String,
    /// The message.
    pub message: Message,
}

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether `destination` wants `kind` and its type can carry it.
#[must_use]
pub fn wants(destination: &Notification, kind: HappeningKind) -> bool {
    let carries = match destination.type_ {
        NotificationType::Slack | NotificationType::Teams | NotificationType::Webhook => true,
        NotificationType::CommitStatus => kind == HappeningKind::Committed,
        NotificationType::PullRequestComment => matches!(
            kind,
            HappeningKind::PullRequest | HappeningKind::Waiting | HappeningKind::Approved
        ),
    };
    carries
        && destination
            .events
            .as_ref()
            .is_none_or(|on| on.is_empty() || on.contains(&kind))
}

fn failing_after(destination: &Notification) -> Duration {
    destination
        .failing_after
        .as_deref()
        .and_then(crate::duration::parse_duration)
        .unwrap_or(DEFAULT_FAILING_AFTER)
}

/// The messages an ImageWatch's reconcile makes, from the status it found (`old`) and the
/// one it leaves (`new`, whose `failureNotified` is brought up to date), for `destinations`.
pub fn watch_messages(
    subject: &Subject,
    destinations: &[Notification],
    old: Option<&ImageWatchStatus>,
    new: &mut ImageWatchStatus,
    now: jiff::Timestamp,
) -> Vec<Outgoing> {
    let empty = ImageWatchStatus::default();
    let old = old.unwrap_or(&empty);
    // Before its first recorded change, what Git held is what the change replaced.
    let held_before = old.applied.as_ref().map(|a| a.tag.clone());
    let mut messages = committed(subject, &old.history, &new.history, |_| held_before.clone());
    // A pull request of the push branch: opened, updated (a new tag), merged.
    if let Some(pr) = &new.pull_request {
        let before = old.pull_request.as_ref().filter(|p| p.number == pr.number);
        let action = match (before, pr.state) {
            (None, PullRequestState::Open) => Some("opened"),
            (Some(b), PullRequestState::Open) if b.tag != pr.tag => Some("updated"),
            (Some(b), PullRequestState::Merged) if b.state != PullRequestState::Merged => {
                Some("merged")
            }
            (None, PullRequestState::Merged) => Some("merged"),
            _ => None,
        };
        if let Some(action) = action {
            let tag = pr.tag.clone().unwrap_or_default();
            messages.push(Message {
                kind: HappeningKind::PullRequest,
                id: format!("pull-request/{}/{action}/{tag}", pr.number),
                title: format!(
                    "{}/{}: pull request #{} {action} ({tag})",
                    subject.namespace, subject.name, pr.number
                ),
                facts: vec![
                    ("Pull request".into(), pr.url.clone()),
                    ("Branch".into(), pr.branch.clone()),
                    ("Tag".into(), tag),
                ],
                link: Some(pr.url.clone()),
                commit: None,
                pull_request: Some(pr.number),
                good: true,
            });
        }
    }
    // Git holds a change someone else made.
    let held_now = condition(&new.conditions, HELD).filter(|c| c.status == "True");
    let held_before = condition(&old.conditions, HELD).is_some_and(|c| c.status == "True");
    if let (Some(c), false) = (held_now, held_before) {
        let mut facts = vec![("Why".into(), c.message.clone())];
        if let Some(h) = &new.held {
            facts.push(("Commit".into(), short(&h.commit).to_owned()));
            facts.push(("Author".into(), h.author.clone()));
        }
        messages.push(Message {
            kind: HappeningKind::Held,
            id: format!(
                "held/{}",
                new.held.as_ref().map_or("", |h| h.commit.as_str())
            ),
            title: format!(
                "{}/{}: held — Git holds a change someone else made",
                subject.namespace, subject.name
            ),
            facts,
            link: None,
            commit: None,
            pull_request: None,
            good: true,
        });
    }
    with_failures(
        subject,
        destinations,
        messages,
        &new.conditions,
        &mut new.failure_notified,
        now,
    )
}

/// The messages a PromotionPolicy's reconcile makes (see [`watch_messages`]).
pub fn promotion_messages(
    subject: &Subject,
    destinations: &[Notification],
    old: Option<&PromotionPolicyStatus>,
    new: &mut PromotionPolicyStatus,
    now: jiff::Timestamp,
) -> Vec<Outgoing> {
    let empty = PromotionPolicyStatus::default();
    let old = old.unwrap_or(&empty);
    let current = |image: Option<&str>| {
        new.candidate
            .iter()
            .find(|c| Some(c.name.as_str()) == image)
            .and_then(|c| c.current.clone())
    };
    let mut messages = committed(subject, &old.history, &new.history, current);
    // The pull request: opened (a new number), updated (a new commit on the same one),
    // merged (gone, and the target holds the candidate).
    let summary = new.candidate_summary.as_deref().unwrap_or("");
    let same_pr = |p: &imagewatch_crd::promotion::PullRequestRef| {
        old.pull_request
            .as_ref()
            .is_some_and(|b| b.number == p.number)
    };
    let pushed_to = |url: &str| {
        new.history
            .iter()
            .filter(|c| c.pull_request.as_deref() == Some(url))
            .find(|c| !old.history.contains(c))
            .and_then(|c| c.commit.clone())
    };
    let action = match (&new.pull_request, &old.pull_request) {
        (Some(pr), _) if !same_pr(pr) => Some((pr.clone(), "opened".to_owned())),
        (Some(pr), _) => pushed_to(&pr.url).map(|c| (pr.clone(), format!("updated/{c}"))),
        (None, Some(before)) => {
            let holds = condition(&new.conditions, READY).is_some_and(|c| {
                c.status == "True" && c.reason == imagewatch_crd::conditions::reason::UP_TO_DATE
            });
            let closed_here = condition(
                &new.conditions,
                imagewatch_crd::conditions::PULL_REQUEST_OPEN,
            )
            .is_some_and(|c| c.reason == imagewatch_crd::conditions::reason::CLOSED);
            (holds && !closed_here).then(|| (before.clone(), "merged".to_owned()))
        }
        (None, None) => None,
    };
    if let Some((pr, action)) = action {
        let verb = action.split('/').next().unwrap_or_default().to_owned();
        messages.push(Message {
            kind: HappeningKind::PullRequest,
            id: format!("pull-request/{}/{action}", pr.number),
            title: format!(
                "{}/{}: pull request #{} {verb} ({summary})",
                subject.namespace, subject.name, pr.number,
            ),
            facts: vec![
                ("Pull request".into(), pr.url.clone()),
                ("Branch".into(), pr.branch.clone()),
            ],
            link: Some(pr.url.clone()),
            commit: None,
            pull_request: Some(pr.number),
            good: true,
        });
    }
    // The candidate's gates: waiting, then passed.
    let gates_now = condition(&new.conditions, imagewatch_crd::conditions::GATES_PASSING);
    let gates_before = condition(&old.conditions, imagewatch_crd::conditions::GATES_PASSING);
    let same_candidate = old.candidate_id == new.candidate_id;
    if let (Some(now_c), Some(candidate)) = (gates_now, new.candidate_id.as_deref()) {
        let turned = !same_candidate || gates_before.is_none_or(|b| b.status != now_c.status);
        if turned && now_c.status != "Unknown" {
            let passed = now_c.status == "True";
            let (kind, verb) = if passed {
                (HappeningKind::Approved, "approved")
            } else {
                (HappeningKind::Waiting, "waiting")
            };
            let mut facts = vec![(
                "Candidate".into(),
                new.candidate_summary.clone().unwrap_or_default(),
            )];
            for gate in new.gates.iter().filter(|g| passed || !g.passed) {
                facts.push((
                    format!("Gate {}", gate.name),
                    format!(
                        "{}{}",
                        if gate.passed { "passed" } else { "waiting" },
                        gate.message
                            .as_deref()
                            .map(|m| format!(": {m}"))
                            .unwrap_or_default()
                    ),
                ));
            }
            messages.push(Message {
                kind,
                id: format!("{verb}/{candidate}"),
                title: format!(
                    "{}/{}: promotion {verb} ({})",
                    subject.namespace,
                    subject.name,
                    new.candidate_summary.as_deref().unwrap_or("")
                ),
                facts,
                link: new.pull_request.as_ref().map(|p| p.url.clone()),
                commit: None,
                pull_request: new.pull_request.as_ref().map(|p| p.number),
                good: true,
            });
        }
    }
    with_failures(
        subject,
        destinations,
        messages,
        &new.conditions,
        &mut new.failure_notified,
        now,
    )
}

/// One `Committed` message per history entry `new` has and `old` had not, oldest first;
/// `before` says what an image's first recorded change replaced.
fn committed(
    subject: &Subject,
    old: &[ChangeRecord],
    new: &[ChangeRecord],
    before: impl Fn(Option<&str>) -> Option<String>,
) -> Vec<Message> {
    let same = |a: &ChangeRecord, b: &ChangeRecord| {
        a.image == b.image && a.tag == b.tag && a.commit == b.commit
    };
    let mut out = Vec::new();
    for (i, change) in new.iter().enumerate().rev() {
        if old.iter().any(|o| same(o, change)) {
            continue;
        }
        // What it replaced: the entry before it for the same image.
        let was = new[i + 1..]
            .iter()
            .chain(old.iter())
            .find(|o| o.image == change.image)
            .map(|o| o.tag.clone())
            .or_else(|| before(change.image.as_deref()))
            .filter(|was| *was != change.tag);
        let what = change
            .image
            .as_deref()
            .map_or_else(String::new, |i| format!("{i} "));
        let mut title = format!(
            "{}/{}: {what}{} committed",
            subject.namespace, subject.name, change.tag
        );
        if let Some(was) = &was {
            title.push_str(&format!(" (was {was})"));
        }
        let commit_link = change.commit.as_deref().and_then(|c| {
            subject
                .repository_web
                .as_deref()
                .map(|web| commit_url(web, c))
        });
        let mut facts = vec![(
            "Tag".into(),
            match &was {
                Some(was) => format!("{was} → {}", change.tag),
                None => change.tag.clone(),
            },
        )];
        if let Some(commit) = &change.commit {
            facts.push((
                "Commit".into(),
                commit_link
                    .clone()
                    .unwrap_or_else(|| short(commit).to_owned()),
            ));
        }
        if let Some(pr) = &change.pull_request {
            facts.push(("Pull request".into(), pr.clone()));
        }
        facts.push(("Trigger".into(), change.trigger.clone()));
        if let Some(seconds) = change.push_to_commit_seconds {
            facts.push(("Push → commit".into(), format!("{seconds:.3} s")));
        }
        out.push(Message {
            kind: HappeningKind::Committed,
            id: format!(
                "committed/{}/{}{}",
                change.commit.as_deref().unwrap_or(""),
                change
                    .image
                    .as_deref()
                    .map_or_else(String::new, |i| format!("{i}:")),
                change.tag
            ),
            title,
            facts,
            link: commit_link.or_else(|| change.pull_request.clone()),
            commit: change.commit.clone(),
            pull_request: None,
            good: true,
        });
    }
    out
}

/// The web URL of `commit` in a repository at `web`.
#[must_use]
pub fn commit_url(web: &str, commit: &str) -> String {
    let web = web.trim_end_matches('/');
    if web.contains("gitlab") {
        format!("{web}/-/commit/{commit}")
    } else {
        format!("{web}/commit/{commit}")
    }
}

/// The web URL of a Git remote URL (`https://host/org/repo.git`, `git@host:org/repo.git`,
/// `ssh://git@host/org/repo.git`), credentials and `.git` dropped.
#[must_use]
pub fn repository_web(git_url: &str) -> Option<String> {
    let (host, path) = if let Some((scheme, rest)) = git_url.split_once("://") {
        let (authority, path) = rest.split_once('/')?;
        let host = authority.rsplit('@').next()?;
        let host = if scheme == "ssh" {
            host.split(':').next()?
        } else {
            host
        };
        (host, path)
    } else {
        let (userhost, path) = git_url.split_once(':')?;
        (userhost.rsplit('@').next()?, path)
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    (!host.is_empty() && !path.is_empty()).then(|| format!("https://{host}/{path}"))
}

/// `messages` routed to the destinations that want them, then `Failing` and `Recovered`.
fn with_failures(
    subject: &Subject,
    destinations: &[Notification],
    messages: Vec<Message>,
    conditions: &[Condition],
    notified: &mut Option<FailureNotified>,
    now: jiff::Timestamp,
) -> Vec<Outgoing> {
    let mut out = route(destinations, messages);
    out.extend(failures(subject, destinations, conditions, notified, now));
    out
}

/// Each message to each destination that wants it.
fn route(destinations: &[Notification], messages: Vec<Message>) -> Vec<Outgoing> {
    let mut out = Vec::new();
    for message in messages {
        for d in destinations.iter().filter(|d| wants(d, message.kind)) {
            out.push(Outgoing {
                destination: d.name.clone(),
                message: message.clone(),
            });
        }
    }
    out
}

/// `Failing` to each destination whose `failingAfter` has passed since `Ready` turned
/// `False` and that was not told yet; `Recovered` to those told, once `Ready` is `True`.
/// `notified` is what the status records of it, updated here.
fn failures(
    subject: &Subject,
    destinations: &[Notification],
    conditions: &[Condition],
    notified: &mut Option<FailureNotified>,
    now: jiff::Timestamp,
) -> Vec<Outgoing> {
    let Some(ready) = condition(conditions, READY) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if ready.status == "True" {
        if let Some(told) = notified.take() {
            let message = Message {
                kind: HappeningKind::Recovered,
                id: format!("recovered/{}", told.since.0),
                title: format!(
                    "{}/{}: recovered ({})",
                    subject.namespace, subject.name, ready.reason
                ),
                facts: vec![
                    ("Ready".into(), format!("True {}", ready.reason)),
                    ("Failing since".into(), told.since.0.to_string()),
                ],
                link: None,
                commit: None,
                pull_request: None,
                good: true,
            };
            for name in told.destinations {
                let wants_it = destinations
                    .iter()
                    .any(|d| d.name == name && wants(d, HappeningKind::Recovered));
                if wants_it {
                    out.push(Outgoing {
                        destination: name,
                        message: message.clone(),
                    });
                }
            }
        }
        return out;
    }
    if ready.status != "False" {
        return out;
    }
    let since = ready.last_transition_time.clone();
    // A new failure starts a new record.
    if notified.as_ref().is_some_and(|n| n.since != since) {
        *notified = None;
    }
    let failing_for = Duration::try_from(now.duration_since(since.0)).unwrap_or_default();
    let message = Message {
        kind: HappeningKind::Failing,
        id: format!("failing/{}", since.0),
        title: format!(
            "{}/{}: failing for {} — {}",
            subject.namespace,
            subject.name,
            crate::duration::human(failing_for),
            ready.reason
        ),
        facts: vec![
            ("Reason".into(), ready.reason.clone()),
            ("Message".into(), ready.message.clone()),
            ("Since".into(), since.0.to_string()),
        ],
        link: None,
        commit: None,
        pull_request: None,
        good: false,
    };
    for d in destinations {
        let told = notified
            .as_ref()
            .is_some_and(|n| n.destinations.contains(&d.name));
        if told || !wants(d, HappeningKind::Failing) || failing_for < failing_after(d) {
            continue;
        }
        notified
            .get_or_insert_with(|| FailureNotified {
                since: since.clone(),
                destinations: Vec::new(),
            })
            .destinations
            .push(d.name.clone());
        out.push(Outgoing {
            destination: d.name.clone(),
            message: message.clone(),
        });
    }
    out
}

/// [`watch_messages`], with when the next `Failing` message falls due ([`failing_due`]).
pub fn watch_notices(
    subject: &Subject,
    destinations: &[Notification],
    old: Option<&ImageWatchStatus>,
    new: &mut ImageWatchStatus,
    now: jiff::Timestamp,
) -> (Vec<Outgoing>, Option<Duration>) {
    let out = watch_messages(subject, destinations, old, new, now);
    let due = failing_due(
        destinations,
        &new.conditions,
        new.failure_notified.as_ref(),
        now,
    );
    (out, due)
}

/// [`promotion_messages`], with when the next `Failing` message falls due ([`failing_due`]).
pub fn promotion_notices(
    subject: &Subject,
    destinations: &[Notification],
    old: Option<&PromotionPolicyStatus>,
    new: &mut PromotionPolicyStatus,
    now: jiff::Timestamp,
) -> (Vec<Outgoing>, Option<Duration>) {
    let out = promotion_messages(subject, destinations, old, new, now);
    let due = failing_due(
        destinations,
        &new.conditions,
        new.failure_notified.as_ref(),
        now,
    );
    (out, due)
}

/// When the next `Failing` message falls due (the soonest destination threshold not yet
/// reached), so the object can be looked at then.
#[must_use]
pub fn failing_due(
    destinations: &[Notification],
    conditions: &[Condition],
    notified: Option<&FailureNotified>,
    now: jiff::Timestamp,
) -> Option<Duration> {
    let ready = condition(conditions, READY).filter(|c| c.status == "False")?;
    let failing_for =
        Duration::try_from(now.duration_since(ready.last_transition_time.0)).unwrap_or_default();
    destinations
        .iter()
        .filter(|d| wants(d, HappeningKind::Failing))
        .filter(|d| notified.is_none_or(|n| !n.destinations.contains(&d.name)))
        .filter_map(|d| failing_after(d).checked_sub(failing_for))
        .min()
}

/// Slack's incoming-webhook payload: `text` (the notification and fallback) and Block Kit
/// `blocks`: a `section` with the title and the facts (`mrkdwn`), a `context` naming the
/// object and the happening's id.
#[must_use]
pub fn slack(subject: &Subject, message: &Message) -> Value {
    let mut body = format!("*{}*", escape_slack(&message.title));
    for (label, value) in &message.facts {
        body.push_str(&format!(
            "\n*{}:* {}",
            escape_slack(label),
            slack_value(value)
        ));
    }
    json!({
        "text": message.title,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": truncate(&body, 3000)}},
            {"type": "context", "elements": [{
                "type": "mrkdwn",
                "text": escape_slack(&format!("{} {}/{} · {}", subject.kind, subject.namespace, subject.name, message.id)),
            }]},
        ],
    })
}

/// A URL as a Slack link, anything else escaped.
fn slack_value(value: &str) -> String {
    if value.starts_with("https://") || value.starts_with("http://") {
        format!("<{value}>")
    } else {
        escape_slack(value)
    }
}

/// Slack's three control characters.
fn escape_slack(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn truncate(text: &str, max: usize) -> String {
    crate::status::truncate(text, max)
}

/// The message a Teams Workflows webhook ("When a Teams webhook request is received")
/// posts: an Adaptive Card 1.4 attachment with the title, a `FactSet` and, with a link, an
/// `Action.OpenUrl`.
#[must_use]
pub fn teams(subject: &Subject, message: &Message) -> Value {
    let mut body = vec![
        json!({"type": "TextBlock", "text": message.title, "weight": "Bolder", "wrap": true,
               "color": if message.good { "Default" } else { "Attention" }}),
        json!({"type": "FactSet", "facts": message.facts.iter()
            .map(|(title, value)| json!({"title": title, "value": value}))
            .collect::<Vec<_>>()}),
        json!({"type": "TextBlock", "text": format!("{} {}/{} · {}", subject.kind, subject.namespace, subject.name, message.id),
               "isSubtle": true, "size": "Small", "wrap": true}),
    ];
    let mut card = json!({
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
    });
    if let Some(link) = &message.link {
        card["actions"] = json!([{"type": "Action.OpenUrl", "title": "Open", "url": link}]);
    }
    card["body"] = Value::Array(std::mem::take(&mut body));
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": card,
        }],
    })
}

/// The generic webhook's JSON body.
#[must_use]
pub fn webhook(subject: &Subject, message: &Message, at: jiff::Timestamp) -> Value {
    json!({
        "id": message.id,
        "happening": message.kind,
        "kind": subject.kind,
        "namespace": subject.namespace,
        "name": subject.name,
        "title": message.title,
        "facts": message.facts.iter().map(|(k, v)| json!({"name": k, "value": v})).collect::<Vec<_>>(),
        "link": message.link,
        "commit": message.commit,
        "pullRequest": message.pull_request,
        "time": at.to_string(),
    })
}

/// The commit status of a `Committed` message: `(commit, description, context)`.
#[must_use]
pub fn commit_status(subject: &Subject, message: &Message) -> Option<(String, String, String)> {
    let commit = message.commit.clone()?;
    Some((
        commit,
        truncate(&message.title, 138),
        format!("imagewatch/{}", subject.name),
    ))
}

/// The pull request comment of a message: `(number, markdown body)`.
#[must_use]
pub fn pull_request_comment(message: &Message) -> Option<(i64, String)> {
    let number = message.pull_request?;
    let mut body = format!("**{}**\n", message.title);
    for (label, value) in &message.facts {
        body.push_str(&format!("\n- {label}: {value}"));
    }
    body.push_str(&format!("\n\n<sub>imagewatch · {}</sub>", message.id));
    Some((number, body))
}

/// `when` as the status keeps times.
#[must_use]
pub fn time(when: jiff::Timestamp) -> Time {
    Time(when)
}

#[cfg(test)]
mod tests;
