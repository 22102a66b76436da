//! The candidate: what the target should run, and how it differs from what it runs now.
//!
//! Built in four steps from what the source runs ([`SourceImage`]s, from ImageWatch statuses or
//! an overlay's [`Inventory`]):
//!
//! 1. **rewrite**: each repository gets the longest matching `imageRewrite` prefix replaced
//!    (a staging account's ECR host → production's);
//! 2. **pin**: `spec.pin` (image name → tag) replaces tags — an explicit, usually older
//!    candidate (a rollback);
//! 3. **align**: `alignTags` followers take the leader's tag (seed 001: only the application
//!    image is watched, the worker and migration images of the release follow it);
//! 4. **diff** against the target's inventory: each image lists what the target holds now.
//!    Images the target has no place for are left out (and reported).
//!
//! Pure.

use std::collections::BTreeMap;

use imagewatch_crd::promotion::{AlignTags, HeldImage, ImageRewrite};

use super::inventory::{ImageSite, Inventory, image_name};
use crate::manifests::ImageRef;

/// One image the source runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceImage {
    /// Repository (before rewrite).
    pub repository: String,
    /// Tag.
    pub tag: String,
    /// Digest, if the source pins one.
    pub digest: Option<String>,
    /// Where it was read (`ImageWatch ns/name`, or a file).
    pub from: String,
}

impl SourceImage {
    /// From a full reference (`repo:tag[@digest]`); `None` without a tag.
    pub fn parse(reference: &str, from: impl Into<String>) -> Option<Self> {
        let parsed = ImageRef::parse(reference).ok()?;
        Some(Self {
            repository: parsed.repository(),
            tag: parsed.tag()?.to_string(),
            digest: parsed.digest().map(str::to_string),
            from: from.into(),
        })
    }

    /// Image name (last path segment).
    pub fn name(&self) -> &str {
        image_name(&self.repository)
    }
}

/// Why an image of the candidate has its tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// What the source runs.
    Source,
    /// `spec.pin`.
    Pinned,
    /// The leader's tag (`alignTags`).
    Aligned {
        /// The leader.
        leader: String,
    },
}

/// One image of the candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CandidateImage {
    /// Image name.
    pub name: String,
    /// Repository in the target (after rewrite).
    pub repository: String,
    /// Tag.
    pub tag: String,
    /// Digest (only when taken unchanged from the source).
    pub digest: Option<String>,
    /// Why this tag.
    pub origin: Origin,
    /// The source reference (before rewrite), when the source runs this image.
    pub source: Option<String>,
    /// The distinct references the target holds now (its highest-precedence places).
    pub current: Vec<String>,
}

impl CandidateImage {
    /// `repository:tag[@digest]`.
    pub fn reference(&self) -> String {
        match &self.digest {
            Some(d) => format!("{}:{}@{}", self.repository, self.tag, d),
            None => format!("{}:{}", self.repository, self.tag),
        }
    }

    /// Whether the target holds something else.
    pub fn changes(&self) -> bool {
        let reference = self.reference();
        self.current.iter().any(|c| *c != reference)
    }

    /// What the target holds, for people: the tag when the repository is the same, the full
    /// reference otherwise; several places that disagree are listed.
    pub fn current_display(&self) -> Option<String> {
        if self.current.is_empty() {
            return None;
        }
        let shown: Vec<String> = self
            .current
            .iter()
            .map(|c| match ImageRef::parse(c) {
                Ok(r) if r.repository() == self.repository && r.digest().is_none() => {
                    r.tag().unwrap_or(c).to_string()
                }
                _ => c.clone(),
            })
            .collect();
        Some(shown.join(", "))
    }
}

/// The candidate.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Candidate {
    /// Images the target has a place for, sorted by name.
    pub images: Vec<CandidateImage>,
    /// Candidate images the target has no place for (not proposed).
    pub not_in_target: Vec<String>,
    /// Whether `spec.pin` chose any tag.
    pub pinned: bool,
    /// Images not proposed again: someone else changed them in the target after the policy
    /// promoted them (`spec.onGitChange`, see [`super::held`]). Sorted by name.
    pub held: Vec<HeldImage>,
}

impl Candidate {
    /// `my-api:v1.2.4, my-api-worker:v1.2.4`.
    pub fn summary(&self) -> String {
        self.images
            .iter()
            .map(|i| format!("{}:{}", i.name, i.tag))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Short fingerprint of the images and references (12 hex digits of a SHA-256).
    pub fn id(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        for image in &self.images {
            hasher.update(image.name.as_bytes());
            hasher.update(b"=");
            hasher.update(image.reference().as_bytes());
            hasher.update(b"\n");
        }
        hex::encode(hasher.finalize())[..12].to_string()
    }

    /// Images proposed: their target places hold something else, and they are not held.
    pub fn changes(&self) -> impl Iterator<Item = &CandidateImage> {
        self.images
            .iter()
            .filter(|i| i.changes() && self.hold_of(&i.name).is_none())
    }

    /// Whether nothing is left to propose: the target holds every image that is not held.
    pub fn is_current(&self) -> bool {
        self.changes().next().is_none()
    }

    /// Image name → tag, of every image but the held ones (the policy does not promote those).
    pub fn tags(&self) -> BTreeMap<String, String> {
        self.images
            .iter()
            .filter(|i| self.hold_of(&i.name).is_none())
            .map(|i| (i.name.clone(), i.tag.clone()))
            .collect()
    }

    /// The hold of image `name`, if it is held.
    pub fn hold_of(&self, name: &str) -> Option<&HeldImage> {
        self.held.iter().find(|h| h.name == name)
    }

    /// The candidate with `held` (images of it) not proposed.
    pub fn with_holds(mut self, mut held: Vec<HeldImage>) -> Self {
        held.retain(|h| self.images.iter().any(|i| i.name == h.name));
        held.sort_by(|a, b| a.name.cmp(&b.name));
        self.held = held;
        self
    }
}

/// Why no candidate could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CandidateError {
    /// Two sources run different references of one image.
    #[error("the sources disagree on {name}: {first} ({first_from}) vs {second} ({second_from})")]
    Conflict {
        /// Image.
        name: String,
        /// One reference.
        first: String,
        /// Where.
        first_from: String,
        /// The other.
        second: String,
        /// Where.
        second_from: String,
    },
    /// A pinned or follower image is neither in the source nor in the target, so its
    /// repository is unknown.
    #[error(
        "{what} {name} is neither in the source nor in the target, so its repository is unknown"
    )]
    UnknownImage {
        /// `spec.pin` or `alignTags follower`.
        what: &'static str,
        /// Image.
        name: String,
    },
    /// The `alignTags` leader is not in the source.
    #[error("alignTags leader {0} is not among the source images ({1})")]
    LeaderMissing(String, String),
    /// A tag or rewritten reference is not valid.
    #[error("{0}")]
    Invalid(String),
    /// The source has no images.
    #[error("the source holds no images")]
    EmptySource,
    /// The target has a place for none of the candidate's images.
    #[error("{path} holds none of the candidate images ({names}); add them there once")]
    NothingInTarget {
        /// Target path.
        path: String,
        /// Candidate image names.
        names: String,
    },
}

/// Replaces the longest matching `from` prefix of `repository` with its `to`.
pub fn rewrite(repository: &str, rules: &[ImageRewrite]) -> String {
    rules
        .iter()
        .filter(|r| !r.from.is_empty() && repository.starts_with(&r.from))
        .max_by_key(|r| r.from.len())
        .map(|r| format!("{}{}", r.to, &repository[r.from.len()..]))
        .unwrap_or_else(|| repository.to_string())
}

/// What goes into a candidate.
#[derive(Debug, Clone, Copy)]
pub struct CandidateInput<'a> {
    /// What the source runs.
    pub sources: &'a [SourceImage],
    /// `to.imageRewrite`.
    pub rewrite: &'a [ImageRewrite],
    /// `alignTags`.
    pub align: Option<&'a AlignTags>,
    /// `pin`.
    pub pin: Option<&'a BTreeMap<String, String>>,
    /// What the target holds.
    pub target: &'a Inventory,
    /// `to.path`, for messages.
    pub target_path: &'a str,
}

/// Builds the candidate (see the module documentation).
pub fn build_candidate(input: CandidateInput<'_>) -> Result<Candidate, CandidateError> {
    if input.sources.is_empty() {
        return Err(CandidateError::EmptySource);
    }
    // 1. what the source runs, rewritten.
    let mut images: BTreeMap<String, CandidateImage> = BTreeMap::new();
    let mut from: BTreeMap<String, &str> = BTreeMap::new();
    for source in input.sources {
        let name = source.name().to_string();
        let repository = rewrite(&source.repository, input.rewrite);
        let image = CandidateImage {
            name: name.clone(),
            repository,
            tag: source.tag.clone(),
            digest: source.digest.clone(),
            origin: Origin::Source,
            source: Some(match &source.digest {
                Some(d) => format!("{}:{}@{}", source.repository, source.tag, d),
                None => format!("{}:{}", source.repository, source.tag),
            }),
            current: Vec::new(),
        };
        ImageRef::parse(&image.reference()).map_err(|e| {
            CandidateError::Invalid(format!(
                "{} rewritten to {}: {e}",
                source.repository, image.repository
            ))
        })?;
        if let Some(existing) = images.get(&name) {
            if existing.reference() != image.reference() {
                return Err(CandidateError::Conflict {
                    name,
                    first: existing.source.clone().unwrap_or_default(),
                    first_from: from[&existing.name].to_string(),
                    second: image.source.clone().unwrap_or_default(),
                    second_from: source.from.clone(),
                });
            }
            continue;
        }
        from.insert(name.clone(), &source.from);
        images.insert(name, image);
    }
    let target_effective = input.target.effective().map_err(CandidateError::Invalid)?;
    let target_repository =
        |name: &str| -> Option<String> { target_effective.get(name).map(|s| s.repository.clone()) };

    // 2. pins.
    let mut pinned = false;
    for (name, tag) in input.pin.into_iter().flatten() {
        crate::manifests::image_ref::validate_tag(tag)
            .map_err(|e| CandidateError::Invalid(format!("spec.pin {name}: {e}")))?;
        pinned = true;
        match images.get_mut(name) {
            Some(image) => {
                image.tag = tag.clone();
                image.digest = None;
                image.origin = Origin::Pinned;
            }
            None => {
                let repository =
                    target_repository(name).ok_or_else(|| CandidateError::UnknownImage {
                        what: "spec.pin image",
                        name: name.clone(),
                    })?;
                images.insert(
                    name.clone(),
                    CandidateImage {
                        name: name.clone(),
                        repository,
                        tag: tag.clone(),
                        digest: None,
                        origin: Origin::Pinned,
                        source: None,
                        current: Vec::new(),
                    },
                );
            }
        }
    }

    // 3. alignment.
    if let Some(align) = input.align {
        let leader_tag = images
            .get(&align.leader)
            .map(|i| i.tag.clone())
            .ok_or_else(|| {
                CandidateError::LeaderMissing(
                    align.leader.clone(),
                    images.keys().cloned().collect::<Vec<_>>().join(", "),
                )
            })?;
        for follower in &align.followers {
            if follower == &align.leader {
                continue;
            }
            let explicitly_pinned = input.pin.is_some_and(|p| p.contains_key(follower));
            if explicitly_pinned {
                continue;
            }
            match images.get_mut(follower) {
                Some(image) => {
                    if image.tag != leader_tag {
                        image.digest = None;
                    }
                    image.tag = leader_tag.clone();
                    image.origin = Origin::Aligned {
                        leader: align.leader.clone(),
                    };
                }
                None => {
                    let repository = target_repository(follower).ok_or_else(|| {
                        CandidateError::UnknownImage {
                            what: "alignTags follower",
                            name: follower.clone(),
                        }
                    })?;
                    images.insert(
                        follower.clone(),
                        CandidateImage {
                            name: follower.clone(),
                            repository,
                            tag: leader_tag.clone(),
                            digest: None,
                            origin: Origin::Aligned {
                                leader: align.leader.clone(),
                            },
                            source: None,
                            current: Vec::new(),
                        },
                    );
                }
            }
        }
    }

    // 4. diff against the target.
    let mut out = Candidate {
        pinned,
        ..Default::default()
    };
    for (name, mut image) in images {
        let sites = target_sites(input.target, &name);
        if sites.is_empty() {
            out.not_in_target.push(name);
            continue;
        }
        let mut current: Vec<String> = sites.iter().map(|s| s.reference.clone()).collect();
        current.sort();
        current.dedup();
        image.current = current;
        out.images.push(image);
    }
    if out.images.is_empty() {
        return Err(CandidateError::NothingInTarget {
            path: input.target_path.to_string(),
            names: out.not_in_target.join(", "),
        });
    }
    Ok(out)
}

/// The target places of `name` that decide what runs: those of its highest-precedence kind
/// (an Argo CD source file overrides a kustomization's images, which override workload
/// containers), so an overridden place is never rewritten under its override.
pub fn target_sites<'a>(target: &'a Inventory, name: &str) -> Vec<&'a ImageSite> {
    let best = target
        .sites
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.kind)
        .min();
    match best {
        Some(kind) => target
            .sites
            .iter()
            .filter(|s| s.name == name && s.kind == kind)
            .collect(),
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::inventory::inventory;

    const STG: &str = "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/";
    const PRD: &str = "222222222222.dkr.ecr.ap-northeast-1.amazonaws.com/";

    fn target(tags: &[(&str, &str)]) -> Inventory {
        let mut text = String::from("kustomize:\n  images:\n");
        for (name, tag) in tags {
            text.push_str(&format!("  - {PRD}{name}:{tag}\n"));
        }
        inventory(
            &[("prd/.argocd-source-my-api-prd.yaml", text.as_str())],
            "prd",
        )
    }

    fn rules() -> Vec<ImageRewrite> {
        vec![ImageRewrite {
            from: STG.into(),
            to: PRD.into(),
        }]
    }

    fn source(name: &str, tag: &str) -> SourceImage {
        SourceImage::parse(
            &format!("{STG}{name}:{tag}"),
            format!("ImageWatch ns/{name}"),
        )
        .unwrap()
    }

    fn align() -> AlignTags {
        AlignTags {
            leader: "my-api".into(),
            followers: vec!["my-api-worker".into(), "my-api-migrate".into()],
        }
    }

    #[test]
    fn rewrite_takes_the_longest_prefix() {
        let rules = vec![
            ImageRewrite {
                from: "a.io/".into(),
                to: "b.io/".into(),
            },
            ImageRewrite {
                from: "a.io/team/".into(),
                to: "c.io/t/".into(),
            },
        ];
        assert_eq!(rewrite("a.io/team/x", &rules), "c.io/t/x");
        assert_eq!(rewrite("a.io/other/x", &rules), "b.io/other/x");
        assert_eq!(rewrite("z.io/x", &rules), "z.io/x");
    }

    #[test]
    fn seed_001_rewrite_and_alignment() {
        let target = target(&[
            ("my-api", "v1.0.0"),
            ("my-api-worker", "v1.0.0"),
            ("my-api-migrate", "v1.0.0"),
        ]);
        let sources = [source("my-api", "v1.1.0")];
        let rules = rules();
        let align = align();
        let c = build_candidate(CandidateInput {
            sources: &sources,
            rewrite: &rules,
            align: Some(&align),
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        assert_eq!(
            c.summary(),
            "my-api:v1.1.0, my-api-migrate:v1.1.0, my-api-worker:v1.1.0"
        );
        assert!(c.images.iter().all(|i| i.repository.starts_with(PRD)));
        assert_eq!(c.changes().count(), 3);
        assert_eq!(
            c.images[1].origin,
            Origin::Aligned {
                leader: "my-api".into()
            }
        );
        assert_eq!(c.images[0].current_display().as_deref(), Some("v1.0.0"));
        assert!(!c.pinned);
    }

    #[test]
    fn nothing_is_proposed_when_the_target_matches() {
        let target = target(&[("my-api", "v1.1.0"), ("my-api-worker", "v1.1.0")]);
        let sources = [source("my-api", "v1.1.0")];
        let rules = rules();
        let align = AlignTags {
            leader: "my-api".into(),
            followers: vec!["my-api-worker".into()],
        };
        let c = build_candidate(CandidateInput {
            sources: &sources,
            rewrite: &rules,
            align: Some(&align),
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        assert!(c.is_current());
    }

    #[test]
    fn a_pin_is_a_rollback_that_followers_follow() {
        let target = target(&[("my-api", "v1.1.0"), ("my-api-worker", "v1.1.0")]);
        let sources = [source("my-api", "v1.2.0")];
        let rules = rules();
        let align = AlignTags {
            leader: "my-api".into(),
            followers: vec!["my-api-worker".into()],
        };
        let pin: BTreeMap<String, String> = [("my-api".to_string(), "v1.0.0".to_string())].into();
        let c = build_candidate(CandidateInput {
            sources: &sources,
            rewrite: &rules,
            align: Some(&align),
            pin: Some(&pin),
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        assert!(c.pinned);
        assert_eq!(c.summary(), "my-api:v1.0.0, my-api-worker:v1.0.0");
        assert_eq!(c.images[0].origin, Origin::Pinned);
    }

    #[test]
    fn disagreeing_sources_are_an_error() {
        let target = target(&[("my-api", "v1")]);
        let sources = [source("my-api", "v1"), source("my-api", "v2")];
        let err = build_candidate(CandidateInput {
            sources: &sources,
            rewrite: &[],
            align: None,
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap_err();
        assert!(matches!(err, CandidateError::Conflict { .. }), "{err}");
    }

    #[test]
    fn images_the_target_lacks_are_reported_not_proposed() {
        let target = target(&[("my-api", "v1")]);
        let sources = [source("my-api", "v2"), source("debug-tools", "v9")];
        let rules = rules();
        let c = build_candidate(CandidateInput {
            sources: &sources,
            rewrite: &rules,
            align: None,
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        assert_eq!(c.summary(), "my-api:v2");
        assert_eq!(c.not_in_target, vec!["debug-tools".to_string()]);
        let err = build_candidate(CandidateInput {
            sources: &[source("debug-tools", "v9")],
            rewrite: &rules,
            align: None,
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap_err();
        assert!(
            matches!(err, CandidateError::NothingInTarget { .. }),
            "{err}"
        );
    }

    #[test]
    fn a_missing_leader_or_unknown_follower_is_explained() {
        let target = target(&[("my-api", "v1")]);
        let err = build_candidate(CandidateInput {
            sources: &[source("other", "v1")],
            rewrite: &[],
            align: Some(&align()),
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap_err();
        assert!(matches!(err, CandidateError::LeaderMissing(..)), "{err}");
        let err = build_candidate(CandidateInput {
            sources: &[source("my-api", "v2")],
            rewrite: &[],
            align: Some(&align()),
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap_err();
        assert!(
            matches!(err, CandidateError::UnknownImage { ref name, .. } if name == "my-api-worker"),
            "{err}"
        );
    }

    #[test]
    fn the_id_changes_with_any_tag() {
        let target = target(&[("my-api", "v1")]);
        let make = |tag: &str| {
            build_candidate(CandidateInput {
                sources: &[source("my-api", tag)],
                rewrite: &rules(),
                align: None,
                pin: None,
                target: &target,
                target_path: "prd",
            })
            .unwrap()
        };
        assert_eq!(make("v2").id(), make("v2").id());
        assert_ne!(make("v2").id(), make("v3").id());
        assert_eq!(make("v2").id().len(), 12);
    }

    #[test]
    fn overridden_places_are_not_edited() {
        let files = [
            (
                "prd/kustomization.yaml",
                "images:\n- name: my-api\n  newName: r.io/my-api\n  newTag: v1\n".to_string(),
            ),
            (
                "prd/deploy.yaml",
                "kind: Deployment\nmetadata: {name: a}\nspec: {template: {spec: {containers: [{name: c, image: r.io/my-api:v0}]}}}\n".to_string(),
            ),
        ];
        let inv = inventory(&files, "prd");
        let sites = target_sites(&inv, "my-api");
        assert_eq!(sites.len(), 1);
        assert_eq!(sites[0].file, "prd/kustomization.yaml");
    }
}
