//! The re-check annotation: `kubectl annotate imagewatch NAME imagewatch.dev/requestedAt=…`
//! asks for one immediate check of the object (the registry listed afresh, Git compared)
//! instead of waiting for its interval. Any value the operator has not acted on yet is a
//! request; the handled value is kept in `status.lastHandledRequestedAt`, so each new value is
//! honoured once, across restarts and replicas.

use std::collections::BTreeMap;

/// The annotation asking for an immediate re-check.
pub const ANNOTATION: &str = "imagewatch.dev/requestedAt";

/// Longest value honoured (the status field's limit).
pub const MAX_VALUE_LEN: usize = 256;

/// The value of a re-check request not handled yet: the annotation's value when it is set,
/// not empty, not too long and differs from `handled`.
#[must_use]
pub fn pending(annotations: &BTreeMap<String, String>, handled: Option<&str>) -> Option<String> {
    let value = annotations.get(ANNOTATION)?.trim();
    if value.is_empty() || value.len() > MAX_VALUE_LEN || Some(value) == handled {
        return None;
    }
    Some(value.to_owned())
}

/// What `status.lastHandledRequestedAt` holds after a reconcile: the request just handled,
/// or the one handled before.
#[must_use]
pub fn handled_after(pending: Option<&str>, handled_before: Option<&str>) -> Option<String> {
    pending.or(handled_before).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotated(value: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(ANNOTATION.to_owned(), value.to_owned())])
    }

    #[test]
    fn a_new_value_is_a_request_once() {
        assert_eq!(
            pending(&annotated("1733400000"), None).as_deref(),
            Some("1733400000")
        );
        assert_eq!(pending(&annotated("1733400000"), Some("1733400000")), None);
        assert_eq!(
            pending(&annotated("1733400060"), Some("1733400000")).as_deref(),
            Some("1733400060")
        );
    }

    #[test]
    fn no_annotation_an_empty_or_an_oversized_value_asks_nothing() {
        assert_eq!(pending(&BTreeMap::new(), None), None);
        assert_eq!(pending(&annotated("  "), None), None);
        assert_eq!(
            pending(&annotated(&"x".repeat(MAX_VALUE_LEN + 1)), None),
            None
        );
    }

    #[test]
    fn the_handled_value_is_kept_until_the_next_request() {
        assert_eq!(handled_after(None, Some("a")).as_deref(), Some("a"));
        assert_eq!(handled_after(Some("b"), Some("a")).as_deref(), Some("b"));
        assert_eq!(handled_after(None, None), None);
    }
}
