use super::*;
use crate::forge::{ForgeProvider, PullRequestState};

fn settings() -> GitPullRequest {
    GitPullRequest {
        provider: ForgeProvider::Gitea,
        api_url: None,
        secret_ref: None,
        repository: None,
        title: None,
        body: None,
        labels: Some(vec!["image-update".into(), "tag/{{tag}}".into(), "".into()]),
        auto_merge: Some(true),
        per_member: None,
    }
}

fn vars() -> TextVars {
    TextVars {
        image: "registry.test/team/api".into(),
        tag: "v1.2.4".into(),
        watch: "team/api".into(),
        branch: "main".into(),
        file: "apps/api/deployment.yaml".into(),
        before: "registry.test/team/api:v1.2.3".into(),
        group: String::new(),
    }
}

#[test]
fn templates_name_the_change() {
    let p = proposal(&settings(), "imagewatch/team-api", &vars());
    assert_eq!(p.title, "Update registry.test/team/api to v1.2.4");
    assert!(
        p.body
            .contains("`main` holds `registry.test/team/api:v1.2.3`")
    );
    assert!(p.body.contains("apps/api/deployment.yaml"));
    assert_eq!(p.labels, ["image-update", "tag/v1.2.4"]);
    assert_eq!(p.head, "imagewatch/team-api");
    assert_eq!(p.base, "main");
    assert!(p.auto_merge);
    let mut own = settings();
    own.title = Some("chore({{watch}}): {{tag}} {{unknown}}".into());
    assert_eq!(
        proposal(&own, "h", &vars()).title,
        "chore(team/api): v1.2.4 {{unknown}}"
    );
    assert_eq!(default_push_branch("team", "api"), "imagewatch/team-api");
    assert_eq!(
        member_push_branch("imagewatch/team-all", "hoge/billing/api/"),
        "imagewatch/team-all-hoge-billing-api"
    );
    assert_eq!(
        group_push_branch("team", "release"),
        "imagewatch/team-group-release"
    );
    let grouped = TextVars {
        group: "release".into(),
        ..vars()
    };
    assert_eq!(
        proposal(&settings(), "h", &grouped).title,
        "Update group release to v1.2.4"
    );
}

#[test]
fn a_group_proposes_the_same_text_from_every_member() {
    let members = |first: usize| {
        let mut m = vec![
            (
                "registry.test:5000/team/api:v2".to_string(),
                "apps/api.yaml".to_string(),
            ),
            (
                "registry.test:5000/team/worker@sha256:ab".to_string(),
                "apps/worker.yaml".to_string(),
            ),
        ];
        m.rotate_left(first);
        m
    };
    let base = TextVars {
        group: "release".into(),
        ..vars()
    };
    let a = group_vars(base.clone(), &members(0));
    let b = group_vars(
        TextVars {
            watch: "team/worker".into(),
            image: "registry.test:5000/team/worker".into(),
            ..base
        },
        &members(1),
    );
    assert_eq!(a, b);
    assert_eq!(
        a.image,
        "registry.test:5000/team/api, registry.test:5000/team/worker"
    );
    assert_eq!(a.file, "apps/api.yaml, apps/worker.yaml");
    assert_eq!(a.watch, "team/group release");
}

fn pr(number: i64, state: PullRequestState) -> PullRequest {
    PullRequest {
        number,
        url: format!("http://gitea.test/o/r/pulls/{number}"),
        title: String::new(),
        body: String::new(),
        head: "imagewatch/team-api".into(),
        base: "main".into(),
        head_sha: None,
        labels: vec![],
        auto_merge: false,
        node_id: None,
        state,
    }
}

#[test]
fn the_status_records_the_pull_request_and_its_end() {
    let opened = Delivered {
        pull_request: Some(pr(4, PullRequestState::Open)),
        action: PrAction::Opened,
        tag: "v2".into(),
        branch: "imagewatch/team-api".into(),
        warnings: vec![],
        commit: None,
    };
    let record = status_of(&opened, None).unwrap();
    assert_eq!(
        (record.number, record.state),
        (4, crate::forge::PullRequestState::Open)
    );
    assert_eq!(record.tag.as_deref(), Some("v2"));
    assert!(wants_finalizer(Some(&record)));

    let closed = Delivered {
        action: PrAction::Closed,
        ..opened.clone()
    };
    let after = status_of(&closed, Some(&record)).unwrap();
    assert_eq!(after.state, crate::forge::PullRequestState::Closed);
    assert!(!wants_finalizer(Some(&after)));

    // Nothing open any more, and the forge says how the recorded one ended (closed by
    // an earlier reconcile whose status was overwritten, or by a person).
    let ended = Delivered {
        pull_request: Some(pr(4, PullRequestState::Closed)),
        action: PrAction::NotNeeded,
        ..opened.clone()
    };
    let after = status_of(&ended, Some(&record)).unwrap();
    assert_eq!(
        (after.number, after.state),
        (4, crate::forge::PullRequestState::Closed)
    );
    assert!(!wants_finalizer(Some(&after)));

    let gone = Delivered {
        pull_request: None,
        action: PrAction::NotNeeded,
        ..opened
    };
    assert_eq!(
        status_of(&gone, Some(&record)).unwrap().state,
        crate::forge::PullRequestState::Merged
    );
    assert_eq!(status_of(&gone, None), None);
    assert!(!wants_finalizer(None));
}

#[test]
fn a_pushed_branch_is_an_update() {
    assert_eq!(action_of(EnsureAction::Created, true), PrAction::Opened);
    assert_eq!(action_of(EnsureAction::Unchanged, true), PrAction::Updated);
    assert_eq!(
        action_of(EnsureAction::Unchanged, false),
        PrAction::Unchanged
    );
    assert_eq!(PrAction::Closed.event_reason(), Some("PullRequestClosed"));
    assert_eq!(PrAction::Unchanged.event_reason(), None);
}
