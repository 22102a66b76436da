//! File names as the planners compare them: normalized repo-relative paths, and the lookup
//! of one file among those read for a target. Every planner and the target dispatch use
//! these; they use nothing else of each other.

/// `path` without empty and `.` components, `/`-separated (`./apps//web/`
/// is `apps/web`). Used to match the caller's file names against target
/// paths.
pub fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// `dir/name`, normalized.
pub(crate) fn join(dir: &str, name: &str) -> String {
    normalize(&format!("{dir}/{name}"))
}

/// The file named `wanted` (compared after normalizing both names):
/// its index, name as given, and contents.
pub(crate) fn find_file<'f, 't, N: AsRef<str>>(
    files: &'f [(N, &'t str)],
    wanted: &str,
) -> Option<(usize, &'f str, &'t str)> {
    let wanted = normalize(wanted);
    files
        .iter()
        .enumerate()
        .find(|(_, (name, _))| normalize(name.as_ref()) == wanted)
        .map(|(i, (name, text))| (i, name.as_ref(), *text))
}
