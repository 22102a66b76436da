//! Names and texts of a promotion: the pull request branch, title and body, and the commit
//! message. Deterministic for a given candidate, so re-rendering on every reconcile changes
//! nothing on the forge until the candidate does. Pure.

use imagewatch_crd::promotion::GateStatus;

use super::candidate::{Candidate, CandidateImage, Origin};
use super::edits::PlacedChange;

/// Default title template.
pub const DEFAULT_TITLE: &str = "Promote {{summary}} to {{path}}";

/// Marker in every body, so people (and tools) can tell the operator's pull requests apart.
pub const BODY_MARKER: &str = "<!-- imagewatch:promotion";

/// The pull request branch of a policy: `imagewatch/promote-<namespace>-<name>`. The operator
/// owns it (creates it, force-updates it, never touches any other branch that way).
pub fn branch_name(namespace: &str, name: &str) -> String {
    format!("imagewatch/promote-{namespace}-{name}")
}

/// What the texts mention besides the candidate.
#[derive(Debug, Clone, Copy)]
pub struct TextContext<'a> {
    /// `namespace/name` of the policy.
    pub policy: &'a str,
    /// Human-readable source (`ImageWatches app=my-api,stage=stg` or a path).
    pub source: &'a str,
    /// `to.path`.
    pub path: &'a str,
    /// Target branch.
    pub branch: &'a str,
}

/// The title from `template` (placeholders `{{summary}}`, `{{path}}`, `{{branch}}`,
/// `{{policy}}`), on one line and at most 256 characters.
pub fn title(template: Option<&str>, candidate: &Candidate, ctx: TextContext<'_>) -> String {
    let template = template
        .filter(|t| !t.trim().is_empty())
        .unwrap_or(DEFAULT_TITLE);
    let text = template
        .replace("{{summary}}", &candidate.summary())
        .replace("{{path}}", ctx.path)
        .replace("{{branch}}", ctx.branch)
        .replace("{{policy}}", ctx.policy);
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    truncate(&one_line, 256)
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

fn why(image: &CandidateImage) -> String {
    match &image.origin {
        Origin::Source => match &image.source {
            Some(s) if *s != image.reference() => format!("from `{s}`"),
            _ => "from the source".to_string(),
        },
        Origin::Pinned => "pinned (spec.pin)".to_string(),
        Origin::Aligned { leader } => format!("aligned with {leader}"),
    }
}

/// The pull request body: a table of every image (old → new), the gates that passed, and how
/// to roll back. Gate messages with times are left out, so the body only changes with the
/// candidate.
pub fn body(candidate: &Candidate, gates: &[GateStatus], ctx: TextContext<'_>) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "Promotes what {} runs to `{}` on `{}`.\n\n",
        ctx.source, ctx.path, ctx.branch
    ));
    out.push_str("| Image | Now | Proposed | Why |\n|---|---|---|---|\n");
    for image in &candidate.images {
        let now = image.current.join("<br>");
        let proposed = match candidate.hold_of(&image.name) {
            Some(held) => format!(
                "held: `{}` set by commit {} (spec.onGitChange)",
                held.value,
                crate::values::short(&held.commit)
            ),
            None if image.changes() => format!("`{}`", image.reference()),
            None => "unchanged".to_string(),
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {} |\n",
            image.name,
            now,
            proposed,
            why(image)
        ));
    }
    if !candidate.not_in_target.is_empty() {
        out.push_str(&format!(
            "\nNot proposed (`{}` has no place for them): {}\n",
            ctx.path,
            candidate.not_in_target.join(", ")
        ));
    }
    if !gates.is_empty() {
        out.push_str("\nGates passed: ");
        out.push_str(
            &gates
                .iter()
                .map(|g| format!("`{}`", g.name))
                .collect::<Vec<_>>()
                .join(", "),
        );
        out.push('\n');
    }
    out.push_str(&format!(
        "\nCandidate `{}`. Opened by imagewatch for PromotionPolicy `{}`: a newer candidate \
         updates this pull request, and it is closed when `{}` already holds the candidate. \
         To roll back after merging, revert the merge commit or set `spec.pin` on the policy.\n",
        candidate.id(),
        ctx.policy,
        ctx.path
    ));
    out.push_str(&format!(
        "\n{BODY_MARKER} policy={} candidate={} -->\n",
        ctx.policy,
        candidate.id()
    ));
    out
}

/// The commit message: subject, then each place changed, then the trailers; the last,
/// `Imagewatch-Policy: <namespace>/<name>`, tells the policy's own commits from changes
/// someone else made in the target (see [`super::held`]).
pub fn commit_message(
    candidate: &Candidate,
    changes: &[PlacedChange],
    ctx: TextContext<'_>,
) -> String {
    let mut out = format!("Promote {} to {}\n\n", candidate.summary(), ctx.path);
    for change in changes {
        out.push_str(&format!(
            "- {}: {} -> {}\n",
            change.file, change.old, change.new
        ));
    }
    out.push_str(&format!(
        "\nPromotionPolicy: {}\nCandidate: {}\n{}",
        ctx.policy,
        candidate.id(),
        crate::held::Trailer::policy(ctx.policy).line()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate() -> Candidate {
        Candidate {
            images: vec![
                CandidateImage {
                    name: "my-api".into(),
                    repository: "r/acct222/my-api".into(),
                    tag: "v2".into(),
                    digest: None,
                    origin: Origin::Source,
                    source: Some("r/acct111/my-api:v2".into()),
                    current: vec!["r/acct222/my-api:v1".into()],
                },
                CandidateImage {
                    name: "my-api-worker".into(),
                    repository: "r/acct222/my-api-worker".into(),
                    tag: "v2".into(),
                    digest: None,
                    origin: Origin::Aligned {
                        leader: "my-api".into(),
                    },
                    source: None,
                    current: vec!["r/acct222/my-api-worker:v2".into()],
                },
            ],
            not_in_target: vec!["debug".into()],
            pinned: false,
            held: vec![],
        }
    }

    fn ctx() -> TextContext<'static> {
        TextContext {
            policy: "team/my-api",
            source: "ImageWatches stage=stg",
            path: "overlays/production",
            branch: "release",
        }
    }

    #[test]
    fn branch_names_are_deterministic() {
        assert_eq!(
            branch_name("team", "my-api"),
            "imagewatch/promote-team-my-api"
        );
    }

    #[test]
    fn titles_fill_the_template() {
        assert_eq!(
            title(None, &candidate(), ctx()),
            "Promote my-api:v2, my-api-worker:v2 to overlays/production"
        );
        assert_eq!(
            title(
                Some("[{{branch}}] {{policy}}\n{{summary}}"),
                &candidate(),
                ctx()
            ),
            "[release] team/my-api my-api:v2, my-api-worker:v2"
        );
        assert!(
            title(Some(&"x".repeat(300)), &candidate(), ctx())
                .chars()
                .count()
                <= 256
        );
    }

    #[test]
    fn the_body_lists_every_image_old_and_new() {
        let gates = vec![GateStatus {
            name: "imageExists".into(),
            passed: true,
            message: Some("2 image(s) exist".into()),
        }];
        let body = body(&candidate(), &gates, ctx());
        assert!(
            body.contains("| my-api | `r/acct222/my-api:v1` | `r/acct222/my-api:v2` | from `r/acct111/my-api:v2` |"),
            "{body}"
        );
        assert!(
            body.contains(
                "| my-api-worker | `r/acct222/my-api-worker:v2` | unchanged | aligned with my-api |"
            ),
            "{body}"
        );
        assert!(body.contains("Not proposed"), "{body}");
        assert!(body.contains("Gates passed: `imageExists`"), "{body}");
        assert!(
            !body.contains("2 image(s) exist"),
            "no volatile gate text: {body}"
        );
        assert!(body.contains(BODY_MARKER), "{body}");
        assert_eq!(body, super::body(&candidate(), &gates, ctx()));
    }

    #[test]
    fn commit_messages_list_each_place() {
        let changes = vec![PlacedChange {
            name: "my-api".into(),
            file: "overlays/production/.argocd-source-a.yaml".into(),
            old: "r/acct222/my-api:v1".into(),
            new: "r/acct222/my-api:v2".into(),
        }];
        let msg = commit_message(&candidate(), &changes, ctx());
        assert!(msg.starts_with(
            "Promote my-api:v2, my-api-worker:v2 to overlays/production\n\n- overlays/production/.argocd-source-a.yaml: r/acct222/my-api:v1 -> r/acct222/my-api:v2\n"
        ), "{msg}");
        assert!(msg.contains("PromotionPolicy: team/my-api"), "{msg}");
        assert!(
            msg.ends_with("\nImagewatch-Policy: team/my-api\n"),
            "the trailer that tells the policy's commits: {msg}"
        );
        assert!(crate::held::Trailer::policy("team/my-api").is_in(&msg));
    }

    #[test]
    fn the_body_says_which_image_is_held() {
        let mut c = candidate();
        c.images[1].current = vec!["r/acct222/my-api-worker:v1".into()];
        let c = c.with_holds(vec![imagewatch_crd::HeldImage {
            name: "my-api-worker".into(),
            commit: "badc0de000000000".into(),
            author: "Jane <jane@example.com>".into(),
            value: "v1".into(),
            replaced: "v2".into(),
        }]);
        let body = body(&c, &[], ctx());
        assert!(
            body.contains("| held: `v1` set by commit badc0de00000 (spec.onGitChange) |"),
            "{body}"
        );
        assert_eq!(c.changes().count(), 1);
        assert!(!c.tags().contains_key("my-api-worker"));
    }
}
