//! The points of a write where the writer's hooks run. The loop that passes them (fetch,
//! plan, commit, push, retry) is the writer's (`writer/commit_loop.rs`); this module only
//! names its stages, so that the test hooks can be set from the command line.

/// Points of a write where a hook may run (see the writer's test hooks):
/// after the fetch, after the commit object was created, right before the
/// push, while the push is under way (remote contacted, ref not yet
/// updated), and after the remote accepted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WritePoint {
    Fetched,
    Committed,
    BeforePush,
    Pushing,
    Pushed,
}

impl WritePoint {
    /// The name used by the `IMAGEWATCH_TEST_CRASH_POINT` hook.
    pub fn name(self) -> &'static str {
        match self {
            WritePoint::Fetched => "after-fetch",
            WritePoint::Committed => "after-commit",
            WritePoint::BeforePush => "before-push",
            WritePoint::Pushing => "mid-push",
            WritePoint::Pushed => "after-push",
        }
    }

    /// Every point, in order.
    pub const ALL: [WritePoint; 5] = [
        WritePoint::Fetched,
        WritePoint::Committed,
        WritePoint::BeforePush,
        WritePoint::Pushing,
        WritePoint::Pushed,
    ];

    /// The point named `name` (see [`WritePoint::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}
