//! `imagewatch explain`: what an ImageWatch or a PromotionPolicy did and why, in words, from
//! its spec and the status the operator keeps (pure: the command reads the object with the
//! user's own credentials and hands it here).
//!
//! For a watch: the rules, the tags the registry listed and, for each one that ranks above
//! the tag chosen, the first rule that refused it (`status.refusedTags`); the tag chosen;
//! what Git holds and since which commit; what would be written next and what holds it back;
//! the last error; when the next check comes; the last changes. With a tag asked about
//! (`--tag`), why that tag is or is not the one.

use std::fmt::Write as _;
use std::time::Duration;

use imagewatch_crd::conditions::{READY, reason};
use imagewatch_crd::{
    ChangeRecord, ImageWatchSpec, ImageWatchStatus, PromotionPolicySpec, PromotionPolicyStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::duration::{human, parse_duration};
use crate::policy::{TagInfo, TagPolicy};
use crate::values::short;

/// The explanation of a watch `namespace/name` at `now`; `tag`: a tag asked about.
#[must_use]
pub fn watch(
    namespace: &str,
    name: &str,
    spec: &ImageWatchSpec,
    status: Option<&ImageWatchStatus>,
    tag: Option<&str>,
    now: jiff::Timestamp,
) -> String {
    let empty = ImageWatchStatus::default();
    let status = status.unwrap_or(&empty);
    let mut out = String::new();
    let _ = writeln!(out, "ImageWatch {namespace}/{name}");
    let _ = writeln!(out, "  Image:       {}", spec.image);
    let _ = writeln!(out, "  Rules:       {}", rules(spec));
    let ready = condition(&status.conditions, READY);
    let _ = writeln!(out, "  Ready:       {}", condition_line(ready, now));
    if spec.is_pattern() {
        pattern_lines(&mut out, status);
    } else {
        single_lines(&mut out, spec, status, now);
    }
    let _ = writeln!(out, "  Next write:  {}", next_write(spec, status, ready));
    // A watch held back on purpose (a window, a freeze, its group) has no error.
    let error = ready.filter(|c| c.status == "False" && !HELD_BACK.contains(&c.reason.as_str()));
    let last_error = error.map_or_else(
        || "none".to_owned(),
        |c| format!("{}: {}", c.reason, c.message),
    );
    let _ = writeln!(out, "  Last error:  {last_error}");
    let _ = writeln!(out, "  Next check:  {}", next_check(spec, error));
    history_lines(&mut out, &status.history, now);
    if let Some(tag) = tag {
        let _ = writeln!(out, "  Tag {tag}:  {}", why_tag(spec, status, tag));
    }
    out
}

/// The explanation of a PromotionPolicy `namespace/name` at `now`.
#[must_use]
pub fn promotion(
    namespace: &str,
    name: &str,
    spec: &PromotionPolicySpec,
    status: Option<&PromotionPolicyStatus>,
    now: jiff::Timestamp,
) -> String {
    let empty = PromotionPolicyStatus::default();
    let status = status.unwrap_or(&empty);
    let mut out = String::new();
    let _ = writeln!(out, "PromotionPolicy {namespace}/{name}");
    let _ = writeln!(
        out,
        "  From:        {}",
        status.source.as_deref().unwrap_or("(not read yet)")
    );
    let _ = writeln!(out, "  To:          {}", spec.to.path);
    let ready = condition(&status.conditions, READY);
    let _ = writeln!(out, "  Ready:       {}", condition_line(ready, now));
    if status.candidate.is_empty() {
        let _ = writeln!(out, "  Candidate:   none");
    } else {
        let _ = writeln!(out, "  Candidate:");
        for image in &status.candidate {
            let _ = writeln!(
                out,
                "    {:<20} {} (the target holds {})",
                image.name,
                image.tag,
                image.current.as_deref().unwrap_or("nothing known")
            );
        }
    }
    if !status.gates.is_empty() {
        let _ = writeln!(out, "  Gates:");
        for gate in &status.gates {
            let line = format!(
                "    {:<14} {:<7} {}",
                gate.name,
                if gate.passed { "passed" } else { "waiting" },
                gate.message.as_deref().unwrap_or("")
            );
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    for held in &status.held {
        let _ = writeln!(
            out,
            "  Held:        {} stays at {}: commit {} by {} replaced {}",
            held.name,
            held.value,
            short(&held.commit),
            held.author,
            held.replaced
        );
    }
    if let Some(pr) = &status.pull_request {
        let _ = writeln!(out, "  Pull request: #{} {}", pr.number, pr.url);
    }
    let last_error = ready.filter(|c| c.status == "False").map_or_else(
        || "none".to_owned(),
        |c| format!("{}: {}", c.reason, c.message),
    );
    let _ = writeln!(out, "  Last error:  {last_error}");
    history_lines(&mut out, &status.history, now);
    out
}

/// `Ready` reasons of a watch that writes nothing on purpose.
const HELD_BACK: [&str; 5] = [
    reason::OUTSIDE_WINDOW,
    reason::FROZEN,
    reason::SUSPENDED,
    reason::WAITING_FOR_GROUP,
    reason::NOT_ALLOWED,
];

fn condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

fn condition_line(ready: Option<&Condition>, now: jiff::Timestamp) -> String {
    match ready {
        None => "not reconciled yet".to_owned(),
        Some(c) => format!(
            "{} {} (since {})",
            c.status,
            c.reason,
            ago(&c.last_transition_time, now)
        ),
    }
}

/// `2m ago`.
fn ago(time: &Time, now: jiff::Timestamp) -> String {
    let seconds = now.duration_since(time.0).as_secs().max(0);
    format!("{} ago", human(Duration::from_secs(seconds.unsigned_abs())))
}

fn rules(spec: &ImageWatchSpec) -> String {
    let tags = spec.tags.clone().unwrap_or_default();
    let mut parts = vec![
        format!("pattern {:?}", tags.pattern.as_deref().unwrap_or("*")),
        format!("order {:?}", tags.order.unwrap_or_default()),
        format!("pick {:?}", tags.pick.unwrap_or_default()),
    ];
    if let Some(exclude) = tags.exclude.as_ref().filter(|e| !e.is_empty()) {
        parts.push(format!("exclude {exclude:?}"));
    }
    if let Some(extract) = tags.extract.as_deref().filter(|e| !e.is_empty()) {
        parts.push(format!("extract {extract:?}"));
    }
    if let Some(platforms) = tags.platforms.as_ref().filter(|p| !p.is_empty()) {
        parts.push(format!("platforms {}", platforms.join(", ")));
    }
    if spec.verify.is_some() {
        parts.push("signatures verified".to_owned());
    }
    if let Some(pin) = spec.pin.as_deref().filter(|p| !p.is_empty()) {
        parts.push(format!("pinned to {pin}"));
    }
    if let Some(group) = spec.group.as_deref().filter(|g| !g.is_empty()) {
        parts.push(format!("group {group}"));
    }
    parts.join(", ")
}

fn single_lines(
    out: &mut String,
    spec: &ImageWatchSpec,
    status: &ImageWatchStatus,
    now: jiff::Timestamp,
) {
    let chosen = status.latest.as_ref().map_or_else(
        || "none".to_owned(),
        |l| match &l.digest {
            Some(d) => format!("{} ({})", l.tag, short_digest(d)),
            None => l.tag.clone(),
        },
    );
    let _ = writeln!(out, "  Chosen:      {chosen}");
    let in_git = match &status.applied {
        None => "not read yet".to_owned(),
        Some(a) => {
            let mut line = a.image.clone().unwrap_or_else(|| a.tag.clone());
            if let Some(commit) = &a.commit {
                let _ = write!(line, " since commit {}", short(commit));
            }
            if let Some(at) = &a.at {
                let _ = write!(line, " ({})", ago(at, now));
            }
            line
        }
    };
    let _ = writeln!(out, "  In Git:      {in_git}");
    if let Some(held) = &status.held {
        let _ = writeln!(
            out,
            "  Held:        commit {} by {} set {} in place of {} ({:?})",
            short(&held.commit),
            held.author,
            held.value,
            held.replaced,
            spec.on_git_change.unwrap_or_default()
        );
    }
    if status.refused_tags.is_empty() {
        let _ = writeln!(out, "  Tags:        none listed ranks above the chosen one");
    } else {
        let _ = writeln!(
            out,
            "  Tags:        {} listed {} above the chosen one, not chosen because:",
            status.refused_tags.len(),
            if status.refused_tags.len() == 1 {
                "ranks"
            } else {
                "rank"
            },
        );
        let width = status
            .refused_tags
            .iter()
            .map(|r| r.tag.len())
            .max()
            .unwrap_or(0);
        for refused in &status.refused_tags {
            let _ = writeln!(
                out,
                "    {:<width$}  {:<16} {}",
                refused.tag, refused.reason, refused.message
            );
        }
    }
}

fn short_digest(digest: &str) -> &str {
    digest.get(..19).unwrap_or(digest)
}

fn pattern_lines(out: &mut String, status: &ImageWatchStatus) {
    let _ = writeln!(
        out,
        "  Members:     {} of {} up to date",
        status.members_ready.unwrap_or(0),
        status.member_count.unwrap_or(0)
    );
    for m in &status.members {
        let _ = writeln!(
            out,
            "    {:<40} {:<12} {:<16} {}",
            m.repository,
            m.applied.as_deref().unwrap_or("-"),
            m.reason,
            m.message.as_deref().unwrap_or("")
        );
    }
}

/// What the next reconcile would write, and what holds it back.
fn next_write(
    spec: &ImageWatchSpec,
    status: &ImageWatchStatus,
    ready: Option<&Condition>,
) -> String {
    let held_back = ready.filter(|c| HELD_BACK.contains(&c.reason.as_str()));
    if spec.is_pattern() {
        return match held_back {
            Some(c) => format!("held back ({}): {}", c.reason, c.message),
            None => "each member's chosen tag, where Git differs (see Members)".to_owned(),
        };
    }
    let (Some(latest), applied) = (&status.latest, status.applied.as_ref()) else {
        return "nothing chosen yet".to_owned();
    };
    if applied.is_some_and(|a| a.tag == latest.tag) {
        return format!("nothing: Git holds the chosen tag {}", latest.tag);
    }
    if let Some(c) = held_back {
        return format!("{} waits ({}): {}", latest.tag, c.reason, c.message);
    }
    if let Some(held) = &status.held {
        return format!(
            "nothing while commit {} by {} holds {} ({:?})",
            short(&held.commit),
            held.author,
            held.value,
            spec.on_git_change.unwrap_or_default()
        );
    }
    if let Some(pr) = status
        .pull_request
        .as_ref()
        .filter(|p| p.state == imagewatch_crd::PullRequestState::Open)
    {
        return format!(
            "{} through pull request #{} {}",
            latest.tag, pr.number, pr.url
        );
    }
    format!("{} at the next check", latest.tag)
}

fn next_check(spec: &ImageWatchSpec, error: Option<&Condition>) -> String {
    let interval = spec.interval_or_default();
    let every = parse_duration(interval).map_or_else(|| interval.to_owned(), human);
    let retry = error.map_or(
        "",
        |_| " (sooner, with backoff, while the error may pass by itself)",
    );
    format!(
        "on a registry event for the image, else within {every} (spec.interval){retry}; annotate imagewatch.dev/requestedAt to check now"
    )
}

fn history_lines(out: &mut String, history: &[ChangeRecord], now: jiff::Timestamp) {
    if history.is_empty() {
        let _ = writeln!(out, "  History:     no change written yet");
        return;
    }
    let _ = writeln!(out, "  History (newest first):");
    for change in history {
        let mut line = format!("    {:<11} ", ago(&change.time, now));
        if let Some(image) = &change.image {
            let _ = write!(line, "{image} ");
        }
        let _ = write!(line, "{}", change.tag);
        if let Some(commit) = &change.commit {
            let _ = write!(line, "  commit {}", short(commit));
        }
        if let Some(pr) = &change.pull_request {
            let _ = write!(line, "  {pr}");
        }
        let _ = write!(line, "  {}", change.trigger);
        if let Some(seconds) = change.push_to_commit_seconds {
            let _ = write!(line, " (push → commit {seconds:.3} s)");
        }
        let _ = writeln!(out, "{line}");
    }
}

/// Why `tag` is or is not the watch's tag.
fn why_tag(spec: &ImageWatchSpec, status: &ImageWatchStatus, tag: &str) -> String {
    if status.latest.as_ref().is_some_and(|l| l.tag == tag) {
        return "the chosen tag".to_owned();
    }
    if let Some(r) = status.refused_tags.iter().find(|r| r.tag == tag) {
        return format!("refused: {} ({})", r.message, r.reason);
    }
    if spec.is_pattern() {
        return "a pattern watch chooses per member; see Members".to_owned();
    }
    let policy = match TagPolicy::from_rules(&spec.tags.clone().unwrap_or_default()) {
        Ok(policy) => policy,
        Err(e) => return format!("the tag rules do not parse: {e}"),
    };
    let info = TagInfo::new(tag);
    if let Some(rule) = policy.rule_refusal(&info) {
        return format!(
            "refused by rule {}: {tag} {}",
            rule.reason(),
            rule.message()
        );
    }
    let Some(chosen) = status.latest.as_ref() else {
        return "passes the tag rules; the registry has not been read yet".to_owned();
    };
    let above = !policy
        .ranked_above(&[info], Some(&TagInfo::new(chosen.tag.clone())))
        .is_empty();
    if above {
        format!(
            "passes the tag rules and ranks above {}, yet was not chosen: the registry did not list it at the last check (pushed since? see Next check)",
            chosen.tag
        )
    } else {
        format!(
            "passes the tag rules but ranks below the chosen tag {} under order {:?}",
            chosen.tag,
            spec.tags
                .clone()
                .unwrap_or_default()
                .order
                .unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests;
