//! The Gitea forge client against a real Gitea (built from its Go module by
//! `e2e/scripts/gitea.sh`, started per test on loopback): create, update, labels, close,
//! reopen; auto-merge that waits for a required commit status and is cancelled; and the retry
//! of Gitea's `405 Please try again later`.

use std::time::{Duration, Instant};

use imagewatch::forge::{
    EnsureAction, ForgeClient, ForgeError, ForgeProvider, NewPullRequest, PullRequestState,
    TRY_AGAIN_ATTEMPTS,
};
use imagewatch_e2e::{
    faultproxy::{Fault, FaultProxy, Verdict},
    gitea::Gitea,
    wait_until,
};

fn client(gitea: &Gitea, api: &str, repository: &str) -> anyhow::Result<ForgeClient> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(ForgeClient::new(
        ForgeProvider::Gitea,
        Some(api),
        Some(repository),
        &gitea.git_url(repository),
        Some(gitea.token.clone()),
        // No idle connections: every switch of the fault proxy closes them.
        reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .pool_max_idle_per_host(0)
            .build()?,
    )?)
}

fn proposal(head: &str, title: &str, auto_merge: bool) -> NewPullRequest {
    NewPullRequest {
        head: head.into(),
        base: "main".into(),
        title: title.into(),
        body: format!("body of {title}"),
        labels: vec![],
        auto_merge,
    }
}

#[tokio::test]
async fn a_pull_request_is_created_updated_labelled_closed_and_reopened() -> anyhow::Result<()> {
    let gitea = Gitea::start().await?;
    let repo = gitea.create_repo("prs").await?;
    gitea
        .put_file(
            &repo,
            "app.yaml",
            "tag: v1\n",
            "imagewatch/app",
            Some("main"),
        )
        .await?;
    let forge = client(&gitea, &gitea.api, &repo)?;

    let first = forge
        .ensure(&proposal("imagewatch/app", "app to v1", false))
        .await?;
    assert_eq!(first.action, EnsureAction::Created);
    let number = first.pull_request.number;
    let seen = gitea.pull(&repo, number).await?;
    assert_eq!(seen["title"], "app to v1");
    assert_eq!(seen["body"], "body of app to v1");
    assert_eq!(seen["head"]["ref"], "imagewatch/app");
    assert_eq!(
        first.pull_request.url,
        seen["html_url"].as_str().unwrap_or_default()
    );

    let again = forge
        .ensure(&proposal("imagewatch/app", "app to v1", false))
        .await?;
    assert_eq!(again.action, EnsureAction::Unchanged);
    assert_eq!(again.pull_request.number, number);

    gitea.create_label(&repo, "promotion").await?;
    let mut newer = proposal("imagewatch/app", "app to v2", false);
    newer.labels = vec!["promotion".into(), "not-a-label".into()];
    let updated = forge.ensure(&newer).await?;
    assert_eq!(updated.action, EnsureAction::Updated);
    assert_eq!(updated.pull_request.number, number);
    assert!(
        updated.warnings.iter().any(|w| w.contains("not-a-label")),
        "{:?}",
        updated.warnings
    );
    let seen = gitea.pull(&repo, number).await?;
    assert_eq!(seen["title"], "app to v2");
    let labels: Vec<&str> = seen["labels"]
        .as_array()
        .map(|ls| ls.iter().filter_map(|l| l["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(labels, ["promotion"]);
    assert_eq!(gitea.pulls(&repo, "all").await?.len(), 1);

    forge.close(&updated.pull_request).await?;
    assert_eq!(forge.get(number).await?.state, PullRequestState::Closed);
    assert_eq!(gitea.pull(&repo, number).await?["state"], "closed");
    assert!(forge.find_open("imagewatch/app", "main").await?.is_none());

    let reopened = forge.reopen(&updated.pull_request).await?;
    assert_eq!(reopened.state, PullRequestState::Open);
    let found = forge.find_open("imagewatch/app", "main").await?;
    assert_eq!(found.map(|p| p.number), Some(number));
    let still = forge.ensure(&newer).await?;
    assert_eq!(still.action, EnsureAction::Unchanged);
    assert_eq!(still.pull_request.number, number);
    assert_eq!(
        gitea.pulls(&repo, "all").await?.len(),
        1,
        "never a duplicate"
    );
    Ok(())
}

#[tokio::test]
async fn auto_merge_waits_for_the_required_status_and_can_be_cancelled() -> anyhow::Result<()> {
    let gitea = Gitea::start().await?;
    let repo = gitea.create_repo("automerge").await?;
    gitea.require_status(&repo, "main", "ci").await?;
    let forge = client(&gitea, &gitea.api, &repo)?;

    // Auto-merge requested right after a close and reopen (when Gitea has answered
    // "try again later"): it merges once the required status turns success, not before.
    let a = gitea
        .put_file(&repo, "a.yaml", "tag: v1\n", "imagewatch/a", Some("main"))
        .await?;
    let opened = forge.ensure(&proposal("imagewatch/a", "a", false)).await?;
    forge.close(&opened.pull_request).await?;
    let reopened = forge.reopen(&opened.pull_request).await?;
    forge.enable_auto_merge(&reopened).await?;
    gitea.set_status(&repo, &a, "ci", "pending").await?;
    assert_eq!(
        forge.get(reopened.number).await?.state,
        PullRequestState::Open,
        "merged while the required status was pending"
    );
    gitea.set_status(&repo, &a, "ci", "success").await?;
    let merged_at = Instant::now();
    wait_until("a to be merged", Duration::from_secs(60), || async {
        Ok((forge.get(reopened.number).await?.state == PullRequestState::Merged).then_some(()))
    })
    .await?;
    eprintln!(
        "merged {:?} after the status turned success",
        merged_at.elapsed()
    );
    let head = gitea.branch_head(&repo, "main").await?;
    assert_ne!(head, a, "a merge commit on main");

    // Created with autoMerge: the client asks for it; then withdrawn.
    let b = gitea
        .put_file(&repo, "b.yaml", "tag: v1\n", "imagewatch/b", Some("main"))
        .await?;
    let created = forge.ensure(&proposal("imagewatch/b", "b", true)).await?;
    assert_eq!(created.action, EnsureAction::Created);
    assert!(created.warnings.is_empty(), "{:?}", created.warnings);
    assert!(created.pull_request.auto_merge);
    forge.cancel_auto_merge(&created.pull_request).await?;
    // Nothing is scheduled any more: a second cancel finds nothing.
    let again = forge.cancel_auto_merge(&created.pull_request).await;
    assert!(
        matches!(again, Err(ForgeError::NotFound { .. })),
        "{again:?}"
    );
    // A control pull request with auto-merge merges on success; the cancelled one does not.
    let c = gitea
        .put_file(&repo, "c.yaml", "tag: v1\n", "imagewatch/c", Some("main"))
        .await?;
    let control = forge.ensure(&proposal("imagewatch/c", "c", true)).await?;
    gitea.set_status(&repo, &b, "ci", "success").await?;
    gitea.set_status(&repo, &c, "ci", "success").await?;
    wait_until("c to be merged", Duration::from_secs(60), || async {
        Ok(
            (forge.get(control.pull_request.number).await?.state == PullRequestState::Merged)
                .then_some(()),
        )
    })
    .await?;
    assert_eq!(
        forge.get(created.pull_request.number).await?.state,
        PullRequestState::Open,
        "merged although its auto-merge was cancelled"
    );
    Ok(())
}

#[tokio::test]
async fn please_try_again_later_is_retried() -> anyhow::Result<()> {
    let gitea = Gitea::start().await?;
    let repo = gitea.create_repo("retry").await?;
    gitea.require_status(&repo, "main", "ci").await?;
    gitea
        .put_file(&repo, "a.yaml", "tag: v1\n", "imagewatch/a", Some("main"))
        .await?;
    let upstream = gitea.url.trim_start_matches("http://").to_string();
    let proxy = FaultProxy::start(&upstream)?;
    let forge = client(&gitea, &format!("http://{}/api/v1", proxy.addr()), &repo)?;
    let pr = forge
        .ensure(&proposal("imagewatch/a", "a", false))
        .await?
        .pull_request;
    let later = || Fault::Status {
        status: 405,
        retry_after: None,
        body: r#"{"message":"Please try again later","url":"http://127.0.0.1/api/swagger"}"#.into(),
    };

    // Twice "try again later", then Gitea itself: scheduled.
    let since = Instant::now();
    proxy.set_matching_times(later(), "/merge", 2)?;
    forge.enable_auto_merge(&pr).await?;
    assert_eq!(proxy.count_since(since, Verdict::Answered(405)), 2);
    assert_eq!(proxy.count_since(since, Verdict::Passed), 1);
    let direct = client(&gitea, &gitea.api, &repo)?;
    direct.cancel_auto_merge(&pr).await?; // it was scheduled for real

    // A forge that never stops saying so: bounded attempts, then the error.
    let since = Instant::now();
    proxy.set_matching(later(), "/merge")?;
    let err = forge.enable_auto_merge(&pr).await;
    assert!(
        matches!(&err, Err(ForgeError::Rejected { status: 405, .. })),
        "{err:?}"
    );
    assert_eq!(
        proxy.count_since(since, Verdict::Answered(405)),
        TRY_AGAIN_ATTEMPTS as usize
    );
    Ok(())
}
