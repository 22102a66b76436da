//! Whether a watch may write over a change someone else made in Git (`spec.onGitChange`).
//!
//! The git writer calls [`decide`] when the target's value in Git differs both from what the
//! watch wants and from what imagewatch last wrote there (`status.applied`, or the value a
//! hold replaced): only then does it read the branch's history for the commit that last
//! changed the value ([`GitChange`]) — the common path reads nothing more. Who made that
//! commit is told by imagewatch's trailer (`Imagewatch-Watch: <namespace>/<name>`, see
//! [`TRAILER`]) and its committer identity, never by timing: a revert made a second after our
//! commit is as deliberate as one made a week later.
//!
//! The decision is pure; the fixtures below are the cases the issue names (a revert by a
//! person, a hand edit, another tool, imagewatch's own older commit, a newer tag arriving,
//! each mode, the resume annotation). A PromotionPolicy holds an image of its candidate on the
//! same decision (`crate::promotion::held`), its commits carrying [`POLICY_TRAILER`].

use imagewatch_crd::{HeldChange, OnGitChange};

use crate::values::{applied_tag, is_bare_tag, short};

/// The git trailer key every commit of the git writer carries, once per edited watch:
/// `Imagewatch-Watch: <namespace>/<name>`.
pub const TRAILER: &str = "Imagewatch-Watch";

/// The git trailer key every promotion commit carries, naming its PromotionPolicy:
/// `Imagewatch-Policy: <namespace>/<name>` (see `crate::promotion::held`).
pub const POLICY_TRAILER: &str = "Imagewatch-Policy";

/// One trailer line of imagewatch's: whose commit it is (a watch's or a policy's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer<'a> {
    /// [`TRAILER`] or [`POLICY_TRAILER`].
    pub key: &'static str,
    /// `namespace/name` of the watch or policy.
    pub name: &'a str,
}

impl<'a> Trailer<'a> {
    /// The trailer of a watch's commits.
    pub fn watch(name: &'a str) -> Self {
        Self { key: TRAILER, name }
    }

    /// The trailer of a policy's promotion commits.
    pub fn policy(name: &'a str) -> Self {
        Self {
            key: POLICY_TRAILER,
            name,
        }
    }

    /// `Key: namespace/name` and a newline.
    pub fn line(&self) -> String {
        format!("{}: {}\n", self.key, self.name)
    }

    /// Whether a commit message carries this trailer (any line of it, any case of the key).
    pub fn is_in(&self, message: &str) -> bool {
        message.lines().any(|line| {
            line.split_once(':').is_some_and(|(key, value)| {
                key.trim().eq_ignore_ascii_case(self.key) && value.trim() == self.name
            })
        })
    }
}

/// The commit that last changed the target's value on the branch, as the history shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitChange {
    /// Commit id.
    pub commit: String,
    /// Author, `Name <email>`.
    pub author: String,
    /// Whether imagewatch made it for this watch: it carries the trailer naming the watch and
    /// imagewatch's committer identity.
    pub ours: bool,
    /// The value it set.
    pub value: String,
}

/// What the writer knows when Git differs from what the watch wants.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// `spec.onGitChange`.
    pub mode: OnGitChange,
    /// What imagewatch last wrote there (`status.applied`, or `status.held.replaced` while
    /// held); `None` when it never wrote.
    pub last_written: Option<&'a str>,
    /// What Git holds now.
    pub current: &'a str,
    /// What the watch wants.
    pub desired: &'a str,
    /// The value of the resume annotation (`imagewatch.dev/resume`), if any.
    pub resume: Option<&'a str>,
}

/// What the writer does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Write the wanted value.
    Write,
    /// Leave Git as it is; report why.
    Hold(HeldChange),
}

/// Whether the history must be read: Git differs from what the watch wants and from what
/// imagewatch last wrote, and the mode may hold.
pub fn needs_history(situation: &Situation<'_>) -> bool {
    situation.mode != OnGitChange::Overwrite
        && !same_value(situation.current, situation.desired)
        && situation
            .last_written
            .is_some_and(|written| !same_value(situation.current, written))
}

/// Write or hold, given the commit that last changed the value (`change`; read only when
/// [`needs_history`] says so, `None` otherwise).
pub fn decide(situation: &Situation<'_>, change: Option<&GitChange>) -> Decision {
    if !needs_history(situation) {
        return Decision::Write;
    }
    let (Some(change), Some(replaced)) = (change, situation.last_written) else {
        return Decision::Write;
    };
    if change.ours {
        // Our own older commit (a status lost or lagging): nobody else asked for this value.
        return Decision::Write;
    }
    if situation
        .resume
        .is_some_and(|r| names_commit(r, &change.commit))
    {
        return Decision::Write;
    }
    if situation.mode == OnGitChange::HoldUntilNewer && !same_value(situation.desired, replaced) {
        return Decision::Write;
    }
    Decision::Hold(HeldChange {
        commit: change.commit.clone(),
        author: change.author.clone(),
        value: change.value.clone(),
        replaced: replaced.to_string(),
    })
}

/// A hold, as the writer answers it: the change held to and the mode that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The change in Git held to.
    pub change: HeldChange,
    /// `spec.onGitChange`.
    pub mode: OnGitChange,
}

impl Hold {
    /// The `Held` condition's message.
    pub fn message(&self) -> String {
        message(&self.change, self.mode)
    }
}

/// Who a hold keeps from writing, for its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    /// An ImageWatch (its writes).
    Watch,
    /// The PromotionPolicy of this name (its promotions of one image).
    Policy {
        /// `metadata.name`, for the resume command.
        name: &'a str,
    },
}

/// The `Held` condition's message for a hold of a watch.
pub fn message(held: &HeldChange, mode: OnGitChange) -> String {
    message_for(held, mode, Holder::Watch)
}

/// The `Held` condition's message for a hold of `holder`: the commit, its author, the tag it
/// set over the one imagewatch wrote, and what resumes.
pub fn message_for(held: &HeldChange, mode: OnGitChange, holder: Holder<'_>) -> String {
    let resume = |resource: &str, name: &str| {
        format!(
            "kubectl annotate {resource} {name} {}={} resumes it",
            imagewatch_crd::conditions::RESUME_ANNOTATION,
            short(&held.commit)
        )
    };
    let replaced = applied_tag(&held.replaced);
    let (wrote, not, until) = match (holder, mode) {
        (Holder::Watch, OnGitChange::Hold) => {
            ("imagewatch wrote", "not overwritten", resume("iw", "NAME"))
        }
        (Holder::Watch, _) => (
            "imagewatch wrote",
            "not overwritten",
            format!("writes resume when the registry has a tag newer than {replaced}"),
        ),
        (Holder::Policy { name }, OnGitChange::Hold) => (
            "the policy promoted",
            "not proposed again",
            resume("pp", name),
        ),
        (Holder::Policy { .. }, _) => (
            "the policy promoted",
            "not proposed again",
            format!("promotions resume when the source offers a tag other than {replaced}"),
        ),
    };
    format!(
        "commit {} by {} set {} over {replaced}, which {wrote}; {not}: {until}",
        short(&held.commit),
        held.author,
        applied_tag(&held.value),
    )
}

/// Whether a resume annotation's value names `commit` (the whole id or at least 7 of its
/// first characters).
pub fn names_commit(annotation: &str, commit: &str) -> bool {
    let given = annotation.trim();
    given.len() >= 7
        && given.len() <= commit.len()
        && commit
            .get(..given.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(given))
}

/// Whether two values Git may hold are the same: equal, or with the same tag when one is a
/// bare tag (a Helm `image.tag`, a pattern member's `applied`).
pub fn same_value(a: &str, b: &str) -> bool {
    a == b || ((is_bare_tag(a) || is_bare_tag(b)) && applied_tag(a) == applied_tag(b))
}

/// Whether a commit message carries imagewatch's trailer naming `watch` (`namespace/name`).
pub fn has_trailer(message: &str, watch: &str) -> bool {
    Trailer::watch(watch).is_in(message)
}

/// The trailer lines for the watches of a commit, each once, in order.
pub fn trailer_lines<'a>(watches: impl IntoIterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for watch in watches {
        if !seen.contains(&watch) {
            seen.push(watch);
        }
    }
    seen.iter()
        .map(|w| Trailer::watch(w).line())
        .collect::<String>()
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "c0ffee0000000000000000000000000000000001";
    const PERSON: &str = "badc0de000000000000000000000000000000002";

    fn situation<'a>(mode: OnGitChange, desired: &'a str) -> Situation<'a> {
        Situation {
            mode,
            last_written: Some("r.example/my-api:v1.4.0"),
            current: "r.example/my-api:v1.3.9",
            desired,
            resume: None,
        }
    }

    fn by_person() -> GitChange {
        GitChange {
            commit: PERSON.into(),
            author: "Jane Doe <jane@example.com>".into(),
            ours: false,
            value: "r.example/my-api:v1.3.9".into(),
        }
    }

    fn held() -> HeldChange {
        HeldChange {
            commit: PERSON.into(),
            author: "Jane Doe <jane@example.com>".into(),
            value: "r.example/my-api:v1.3.9".into(),
            replaced: "r.example/my-api:v1.4.0".into(),
        }
    }

    #[test]
    fn a_revert_by_a_person_holds_until_a_newer_tag() {
        let s = situation(OnGitChange::HoldUntilNewer, "r.example/my-api:v1.4.0");
        assert!(needs_history(&s));
        assert_eq!(decide(&s, Some(&by_person())), Decision::Hold(held()));
        // v1.4.1 arrives: the replaced v1.4.0 is no longer what the watch wants.
        let newer = situation(OnGitChange::HoldUntilNewer, "r.example/my-api:v1.4.1");
        assert_eq!(decide(&newer, Some(&by_person())), Decision::Write);
    }

    #[test]
    fn a_hand_edit_or_another_tool_holds_as_a_revert_does() {
        let s = situation(OnGitChange::HoldUntilNewer, "r.example/my-api:v1.4.0");
        let hand = GitChange {
            value: "r.example/my-api:hotfix-1".into(),
            ..by_person()
        };
        let tool = GitChange {
            author: "renovate[bot] <bot@renovate.example>".into(),
            ..by_person()
        };
        for change in [hand, tool] {
            let Decision::Hold(h) = decide(&s, Some(&change)) else {
                panic!("{change:?} must hold");
            };
            assert_eq!((h.commit, h.author), (change.commit, change.author));
        }
    }

    #[test]
    fn imagewatchs_own_older_commit_is_written_over() {
        let s = situation(OnGitChange::Hold, "r.example/my-api:v1.4.0");
        let ours = GitChange {
            commit: OURS.into(),
            author: "imagewatch <imagewatch@example.com>".into(),
            ours: true,
            value: "r.example/my-api:v1.3.9".into(),
        };
        assert_eq!(decide(&s, Some(&ours)), Decision::Write);
    }

    #[test]
    fn hold_waits_for_the_annotation_naming_the_commit() {
        let s = situation(OnGitChange::Hold, "r.example/my-api:v1.4.1");
        // A newer tag does not resume `Hold`.
        assert!(matches!(decide(&s, Some(&by_person())), Decision::Hold(_)));
        for wrong in ["c0ffee0", "badc0d", "yes"] {
            let s = Situation {
                resume: Some(wrong),
                ..s
            };
            assert!(
                matches!(decide(&s, Some(&by_person())), Decision::Hold(_)),
                "{wrong}"
            );
        }
        for right in ["badc0de", PERSON, " BADC0DE0000 "] {
            let s = Situation {
                resume: Some(right),
                ..s
            };
            assert_eq!(decide(&s, Some(&by_person())), Decision::Write, "{right}");
        }
    }

    #[test]
    fn the_annotation_also_resumes_hold_until_newer() {
        let s = Situation {
            resume: Some(&PERSON[..12]),
            ..situation(OnGitChange::HoldUntilNewer, "r.example/my-api:v1.4.0")
        };
        assert_eq!(decide(&s, Some(&by_person())), Decision::Write);
    }

    #[test]
    fn overwrite_is_todays_behaviour() {
        let s = situation(OnGitChange::Overwrite, "r.example/my-api:v1.4.0");
        assert!(!needs_history(&s));
        assert_eq!(decide(&s, Some(&by_person())), Decision::Write);
    }

    #[test]
    fn git_holding_what_imagewatch_wrote_needs_no_history() {
        // The common path: a newer tag over imagewatch's own last value.
        let s = Situation {
            current: "r.example/my-api:v1.4.0",
            ..situation(OnGitChange::Hold, "r.example/my-api:v1.4.1")
        };
        assert!(!needs_history(&s));
        assert_eq!(decide(&s, None), Decision::Write);
        // Never written before: nothing of ours to protect, today's behaviour.
        let s = Situation {
            last_written: None,
            ..situation(OnGitChange::Hold, "r.example/my-api:v1.4.1")
        };
        assert!(!needs_history(&s));
        // Git already holds what the watch wants.
        let s = situation(OnGitChange::Hold, "r.example/my-api:v1.3.9");
        assert!(!needs_history(&s));
    }

    #[test]
    fn bare_tags_compare_with_image_references() {
        // A pattern member's applied is a tag; a Helm `image.tag` holds one.
        let s = Situation {
            last_written: Some("v1.4.0"),
            current: "v1.3.9",
            ..situation(OnGitChange::HoldUntilNewer, "r.example/my-api:v1.4.0")
        };
        assert!(matches!(
            decide(
                &s,
                Some(&GitChange {
                    value: "v1.3.9".into(),
                    ..by_person()
                })
            ),
            Decision::Hold(_)
        ));
        assert!(same_value("v1.4.0", "r.example/my-api:v1.4.0"));
        assert!(!same_value(
            "r.example/my-api:v1.4.0@sha256:aa",
            "r.example/my-api:v1.4.0@sha256:bb"
        ));
    }

    #[test]
    fn trailers_name_each_watch_once_and_are_found_in_any_message() {
        let lines = trailer_lines(["a/w1", "b/w2", "a/w1"]);
        assert_eq!(lines, "Imagewatch-Watch: a/w1\nImagewatch-Watch: b/w2\n");
        let message = format!("chore: custom template\n\nsome body\n\n{lines}");
        assert!(has_trailer(&message, "a/w1"));
        assert!(has_trailer(&message, "b/w2"));
        assert!(!has_trailer(&message, "a/w"));
        assert!(!has_trailer("Revert \"imagewatch: x\"\n\nbody", "a/w1"));
    }

    #[test]
    fn the_message_names_commit_author_and_tag() {
        let text = message(&held(), OnGitChange::HoldUntilNewer);
        assert_eq!(
            text,
            "commit badc0de00000 by Jane Doe <jane@example.com> set v1.3.9 over v1.4.0, which \
             imagewatch wrote; not overwritten: writes resume when the registry has a tag newer \
             than v1.4.0"
        );
        assert!(message(&held(), OnGitChange::Hold).contains("imagewatch.dev/resume=badc0de00000"));
    }

    #[test]
    fn a_policy_hold_says_what_resumes_promotions() {
        let policy = Holder::Policy { name: "my-api-prd" };
        let change = HeldChange {
            value: "v1.3.9".into(),
            replaced: "v1.4.0".into(),
            ..held()
        };
        assert_eq!(
            message_for(&change, OnGitChange::HoldUntilNewer, policy),
            "commit badc0de00000 by Jane Doe <jane@example.com> set v1.3.9 over v1.4.0, which \
             the policy promoted; not proposed again: promotions resume when the source offers \
             a tag other than v1.4.0"
        );
        assert!(message_for(&change, OnGitChange::Hold, policy).ends_with(
            "kubectl annotate pp my-api-prd imagewatch.dev/resume=badc0de00000 resumes it"
        ));
    }

    #[test]
    fn a_policy_trailer_is_not_a_watch_trailer() {
        let policy = Trailer::policy("team/prd");
        assert_eq!(policy.line(), "Imagewatch-Policy: team/prd\n");
        let message = format!("Promote my-api:v2 to prd\n\n{}", policy.line());
        assert!(policy.is_in(&message));
        assert!(!Trailer::watch("team/prd").is_in(&message));
        assert!(!Trailer::policy("team/other").is_in(&message));
    }
}
