//! The target side: the file edits that make `to.path` hold the candidate, planned with the
//! byte-minimal editor (`manifests::plan_edit`) place by place. Pure.

use std::collections::HashSet;

use super::candidate::{Candidate, target_sites};
use super::inventory::Inventory;
use crate::edit::FileEdit;
use crate::manifests::{ImageChange, TargetSpec, plan_edit};

/// One place changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedChange {
    /// Image name.
    pub name: String,
    /// File.
    pub file: String,
    /// Before.
    pub old: String,
    /// After.
    pub new: String,
}

/// The edits, and what each changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TargetEdits {
    /// Whole-file replacements, sorted by path.
    pub files: Vec<FileEdit>,
    /// Each place changed.
    pub changes: Vec<PlacedChange>,
}

/// Plans every edit of `files` (the YAML files under `to.path`, as read for `target`) that
/// makes the candidate's images current. Several places in one file are edited one after the
/// other on the updated text.
pub fn plan_target_edits(
    files: &[(String, String)],
    target: &Inventory,
    candidate: &Candidate,
) -> Result<TargetEdits, String> {
    let mut current: Vec<(String, String)> = files.to_vec();
    let mut out = TargetEdits::default();
    for image in candidate.changes() {
        let reference = image.reference();
        let mut seen: HashSet<&TargetSpec> = HashSet::new();
        for site in target_sites(target, &image.name) {
            if site.reference == reference || !seen.insert(&site.target) {
                continue;
            }
            let view: Vec<(&str, &str)> = current
                .iter()
                .map(|(n, t)| (n.as_str(), t.as_str()))
                .collect();
            let plan = plan_edit(&view, &site.target, &ImageChange::Image(reference.clone()))
                .map_err(|e| format!("{}: {e}", site.file))?;
            let edits: Vec<_> = plan.edits().cloned().collect();
            drop(view);
            for edit in edits {
                out.changes.push(PlacedChange {
                    name: image.name.clone(),
                    file: edit.file.clone(),
                    old: edit.old.clone(),
                    new: edit.new.clone(),
                });
                match current.iter_mut().find(|(n, _)| *n == edit.file) {
                    Some(slot) => slot.1 = edit.new_contents,
                    None => current.push((edit.file, edit.new_contents)),
                }
            }
        }
    }
    for (name, text) in &current {
        let before = files.iter().find(|(n, _)| n == name).map(|(_, t)| t);
        if before != Some(text) {
            out.files.push(FileEdit {
                path: name.clone(),
                contents: text.as_bytes().to_vec(),
            });
        }
    }
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::promotion::candidate::{CandidateInput, SourceImage, build_candidate};
    use crate::promotion::inventory::inventory;
    use imagewatch_crd::promotion::{AlignTags, ImageRewrite};

    const PRD_SOURCE: &str = "# production images (kept by imagewatch)\nkustomize:\n  images:\n  - 222222222222.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.0.0\n  - \"222222222222.dkr.ecr.ap-northeast-1.amazonaws.com/my-api-worker:v1.0.0\"\n  - 222222222222.dkr.ecr.ap-northeast-1.amazonaws.com/my-api-migrate:v1.0.0 # migrations\n";

    #[test]
    fn every_place_changes_and_nothing_else() {
        let files = vec![(
            "prd/.argocd-source-my-api-prd.yaml".to_string(),
            PRD_SOURCE.to_string(),
        )];
        let target = inventory(&files, "prd");
        let candidate = build_candidate(CandidateInput {
            sources: &[SourceImage::parse(
                "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.1.0",
                "w",
            )
            .unwrap()],
            rewrite: &[ImageRewrite {
                from: "111111111111.".into(),
                to: "222222222222.".into(),
            }],
            align: Some(&AlignTags {
                leader: "my-api".into(),
                followers: vec!["my-api-worker".into(), "my-api-migrate".into()],
            }),
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        let edits = plan_target_edits(&files, &target, &candidate).unwrap();
        assert_eq!(edits.files.len(), 1);
        assert_eq!(edits.changes.len(), 3);
        assert_eq!(
            String::from_utf8(edits.files[0].contents.clone()).unwrap(),
            PRD_SOURCE.replace("v1.0.0", "v1.1.0"),
            "only the tags changed; comments and quoting kept"
        );
        // Planning again on the result finds nothing to do.
        let after = vec![(
            "prd/.argocd-source-my-api-prd.yaml".to_string(),
            PRD_SOURCE.replace("v1.0.0", "v1.1.0"),
        )];
        let target_after = inventory(&after, "prd");
        let again = build_candidate(CandidateInput {
            target: &target_after,
            ..CandidateInput {
                sources: &[SourceImage::parse(
                    "111111111111.dkr.ecr.ap-northeast-1.amazonaws.com/my-api:v1.1.0",
                    "w",
                )
                .unwrap()],
                rewrite: &[ImageRewrite {
                    from: "111111111111.".into(),
                    to: "222222222222.".into(),
                }],
                align: None,
                pin: None,
                target: &target,
                target_path: "prd",
            }
        })
        .unwrap();
        assert!(again.is_current());
        assert!(
            plan_target_edits(&after, &target_after, &again)
                .unwrap()
                .files
                .is_empty()
        );
    }

    #[test]
    fn workloads_and_kustomizations_are_edited_in_place() {
        let files = vec![
            (
                "prd/deploy.yaml".to_string(),
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: my-api\nspec:\n  template:\n    spec:\n      containers:\n      - name: app\n        image: 'r.io/prd/my-api:v1' # app\n".to_string(),
            ),
            (
                "prd/sub/kustomization.yaml".to_string(),
                "images:\n- name: worker\n  newName: r.io/prd/my-api-worker\n  newTag: v1\n".to_string(),
            ),
        ];
        let target = inventory(&files, "prd");
        let candidate = build_candidate(CandidateInput {
            sources: &[
                SourceImage::parse("r.io/stg/my-api:v2", "a").unwrap(),
                SourceImage::parse("r.io/stg/my-api-worker:v2", "b").unwrap(),
            ],
            rewrite: &[ImageRewrite {
                from: "r.io/stg/".into(),
                to: "r.io/prd/".into(),
            }],
            align: None,
            pin: None,
            target: &target,
            target_path: "prd",
        })
        .unwrap();
        let edits = plan_target_edits(&files, &target, &candidate).unwrap();
        let text = |i: usize| String::from_utf8(edits.files[i].contents.clone()).unwrap();
        assert_eq!(edits.files[0].path, "prd/deploy.yaml");
        assert_eq!(text(0), files[0].1.replace("my-api:v1'", "my-api:v2'"));
        assert_eq!(text(1), files[1].1.replace("newTag: v1", "newTag: v2"));
    }
}
