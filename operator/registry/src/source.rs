//! Scan step, the seam between the controller and registries: [`TagSource`], implemented
//! by the distribution client and by the ECR source.

use futures::future::BoxFuture;

use super::auth::Credentials;
use super::error::RegistryError;
use super::reference::RepositoryRef;
use imagewatch_engine::policy::TagInfo;

/// Where the controller gets tags and digests from. Object-safe (boxed futures, no
/// `async_trait`) so the controller can hold `Arc<dyn TagSource>` and pick the
/// implementation per registry.
pub trait TagSource: Send + Sync {
    /// All tags of `repo`.
    fn list<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>>;

    /// Manifest digest of `reference` (a tag or a digest) in `repo`; `Ok(None)` when it does
    /// not exist.
    fn digest<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        reference: &'a str,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Option<String>, RegistryError>>;

    /// All tags of `repo` with `pushed_at` filled as far as this source can, for `Newest`
    /// ordering; `budget` bounds extra per-tag lookups (`None`: the source's default). The
    /// default is [`Self::list`], right for sources whose listing carries push times.
    fn list_with_times<'a>(
        &'a self,
        repo: &'a RepositoryRef,
        creds: &'a Credentials,
        budget: Option<u32>,
    ) -> BoxFuture<'a, Result<Vec<TagInfo>, RegistryError>> {
        let _ = budget;
        self.list(repo, creds)
    }
}
