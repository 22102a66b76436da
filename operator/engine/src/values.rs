//! Values Git holds for a target, as the status and the hold decisions read them: the tag of
//! an image reference or a bare tag, and the short form of a commit id. A leaf module: both
//! `status` and `held` use it.

/// The tag of an image reference (empty when it has none).
pub fn tag_of(image: &str) -> String {
    crate::manifests::ImageRef::parse(image)
        .ok()
        .and_then(|r| r.tag().map(str::to_string))
        .unwrap_or_default()
}

/// The tag Git holds after a write: the tag of an image reference, or the value itself when
/// the target holds a bare tag (a Helm `image.tag` key, a `newTag`). An OCI tag never has a
/// `/`, `:` or `@`, and a write always leaves a tag, so a value without them is a tag.
pub fn applied_tag(value: &str) -> String {
    match tag_of(value) {
        tag if tag.is_empty() && is_bare_tag(value) => value.to_string(),
        tag => tag,
    }
}

/// Whether a value Git holds is a tag alone rather than an image reference.
pub fn is_bare_tag(value: &str) -> bool {
    !value.is_empty() && !value.contains(['/', ':', '@'])
}

/// The short form of a commit id (its first 12 characters).
pub fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}
