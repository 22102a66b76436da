//! Promotion decisions (pure): what a `PromotionPolicy` proposes to its target, and whether its
//! gates let it.
//!
//! The flow of one policy reconcile (`controller::promotion`) and the module doing each pure
//! step:
//!
//! 1. the **source**: the applied `image:tag` of every selected ImageWatch
//!    ([`sources_from_watches`]), or the images of an overlay ([`inventory`] of `from.path`);
//! 2. the **candidate** ([`candidate`]): prefix rewrites (`to.imageRewrite`), `spec.pin`,
//!    `alignTags`, and the diff against what `to.path` holds now — nothing is proposed when it
//!    already matches;
//! 3. the **gates** ([`gates`]): facts gathered by the controller (manifest HEADs, watch times,
//!    the Argo CD Application, the approval annotation) evaluated into `status.gates`;
//! 4. the **edits** ([`edits`]): byte-minimal edits of every place in `to.path` holding a
//!    promoted image;
//! 5. the **texts** ([`render`]): branch name, pull request title and body, commit message.
//!
//! Before 2, with `gates.soakSince: FirstApplied`, [`soak`] picks the source state to propose
//! from the source's history (the newest one first applied at least the soak ago).
//!
//! Between 2 and 3, [`held`] tells which images of the candidate are not proposed again
//! because someone else changed them in the target after the policy promoted them
//! (`spec.onGitChange`).

pub mod candidate;
pub mod edits;
pub mod gates;
pub mod held;
pub mod inventory;
pub mod render;
pub mod soak;

use imagewatch_crd::{ImageWatchSpec, ImageWatchStatus};

pub use candidate::{
    Candidate, CandidateError, CandidateImage, CandidateInput, Origin, SourceImage,
    build_candidate, rewrite,
};
pub use edits::{PlacedChange, TargetEdits, plan_target_edits};
pub use gates::{GateFacts, GateReport, evaluate};
pub use inventory::{ImageSite, Inventory, SiteKind, image_name, inventory};
pub use render::branch_name;

/// What the source runs, with the facts the `soak` and `application` gates need.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceState {
    /// The images.
    pub images: Vec<SourceImage>,
    /// `(source, when it was applied)` for each source.
    pub applied: Vec<(String, Option<jiff::Timestamp>)>,
    /// Commits the source's images were written in (the Application's revision must hold
    /// them).
    pub commits: Vec<String>,
}

/// What the source step reads of one selected ImageWatch: its name, spec and status (the
/// controller passes the parts of the objects it listed).
#[derive(Debug, Clone, Copy)]
pub struct WatchSource<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// Its spec.
    pub spec: &'a ImageWatchSpec,
    /// Its status, if it has one yet.
    pub status: Option<&'a ImageWatchStatus>,
}

/// The source state of selected ImageWatches: each one's `status.applied` (image, commit,
/// time). A watch that has applied nothing yet is an error naming it (the candidate would be
/// incomplete).
pub fn sources_from_watches(watches: &[WatchSource<'_>]) -> Result<SourceState, String> {
    if watches.is_empty() {
        return Err("from.watchSelector selects no ImageWatch in this namespace".into());
    }
    let mut state = SourceState::default();
    let mut sorted: Vec<&WatchSource<'_>> = watches.iter().collect();
    sorted.sort_by_key(|w| w.name);
    for watch in sorted {
        let label = format!("ImageWatch {}", watch.name);
        let applied = watch
            .status
            .and_then(|s| s.applied.as_ref())
            .ok_or_else(|| format!("{label} has not applied a tag yet"))?;
        let reference = applied
            .image
            .clone()
            .unwrap_or_else(|| format!("{}:{}", watch.spec.image, applied.tag));
        let image = SourceImage::parse(&reference, label.clone())
            .ok_or_else(|| format!("{label} applied {reference:?}, which has no valid tag"))?;
        state.images.push(image);
        state
            .applied
            .push((label, applied.at.as_ref().map(|t| t.0)));
        if let Some(commit) = applied.commit.clone().filter(|c| !c.is_empty())
            && !state.commits.contains(&commit)
        {
            state.commits.push(commit);
        }
    }
    Ok(state)
}

/// The source state of an overlay: the effective image of each name in its inventory,
/// applied in `commit` at `at` (the last commit that changed the overlay).
pub fn sources_from_inventory(
    inventory: &Inventory,
    path: &str,
    commit: Option<String>,
    at: Option<jiff::Timestamp>,
) -> Result<SourceState, String> {
    let effective = inventory.effective()?;
    let mut state = SourceState::default();
    for (name, site) in effective {
        match SourceImage::parse(&site.reference, site.file.clone()) {
            Some(image) => state.images.push(image),
            None => {
                return Err(format!(
                    "{} holds {name} as {:?}, which has no tag",
                    site.file, site.reference
                ));
            }
        }
    }
    if state.images.is_empty() {
        return Err(format!("{path} holds no images"));
    }
    state.applied.push((path.to_string(), at));
    state.commits.extend(commit);
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use imagewatch_crd::AppliedImage;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// An ImageWatch's name, spec and status.
    type Watch = (String, ImageWatchSpec, Option<ImageWatchStatus>);

    fn watch(name: &str, applied: Option<(&str, &str)>) -> Watch {
        let spec: ImageWatchSpec = serde_json::from_value(serde_json::json!({
            "image": "r.io/acct111/my-api",
            "target": {"workload": {"path": "p", "kind": "Deployment", "name": "a", "container": "c"}}
        }))
        .unwrap();
        let status = applied.map(|(image, commit)| ImageWatchStatus {
            applied: Some(AppliedImage {
                tag: image.rsplit(':').next().unwrap().to_string(),
                image: Some(image.to_string()),
                commit: Some(commit.to_string()),
                at: Some(Time(jiff::Timestamp::from_second(100).unwrap())),
            }),
            ..Default::default()
        });
        (name.to_string(), spec, status)
    }

    fn parts(w: &Watch) -> WatchSource<'_> {
        WatchSource {
            name: &w.0,
            spec: &w.1,
            status: w.2.as_ref(),
        }
    }

    #[test]
    fn watches_give_images_times_and_commits() {
        let (b, a) = (
            watch("b", Some(("r.io/acct111/my-api:v2", "c1"))),
            watch("a", Some(("r.io/acct111/my-api-worker:v2", "c1"))),
        );
        let state = sources_from_watches(&[parts(&b), parts(&a)]).unwrap();
        assert_eq!(state.images.len(), 2);
        assert_eq!(state.images[0].from, "ImageWatch a");
        assert_eq!(state.commits, vec!["c1".to_string()]);
        assert_eq!(state.applied.len(), 2);
    }

    #[test]
    fn a_watch_without_a_tag_holds_the_candidate_back() {
        let err = sources_from_watches(&[parts(&watch("a", None))]).unwrap_err();
        assert!(err.contains("ImageWatch a has not applied"), "{err}");
        assert!(sources_from_watches(&[]).is_err());
    }

    #[test]
    fn an_overlay_gives_its_effective_images() {
        let files = [(
            "stg/.argocd-source-x.yaml",
            "kustomize:\n  images:\n  - r.io/acct111/my-api:v3\n",
        )];
        let inv = inventory(&files, "stg");
        let state = sources_from_inventory(&inv, "stg", Some("abc".into()), None).unwrap();
        assert_eq!(state.images[0].tag, "v3");
        assert_eq!(state.commits, vec!["abc".to_string()]);
        let empty = inventory::<&str, &str>(&[], "stg");
        assert!(sources_from_inventory(&empty, "stg", None, None).is_err());
    }
}
