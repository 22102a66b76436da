//! Repository patterns of pattern watches (`team/*/api`): checking a pattern, matching a
//! repository name against it segment by segment with captures, the literal prefix to list,
//! and filling the captures into `$1..$n` of a target path. Pure; used by the ECR source and
//! the members of pattern watches.

/// Checks a repository pattern: non-empty `/`-separated segments, each either literal, `*`,
/// or one literal prefix/suffix around a single `*` (`svc-*`). Returns a message for users.
pub fn validate_pattern(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("repository pattern is empty".into());
    }
    for segment in pattern.split('/') {
        if segment.is_empty() {
            return Err(format!(
                "repository pattern {pattern:?} has an empty path segment"
            ));
        }
        if segment.matches('*').count() > 1 {
            return Err(format!(
                "repository pattern {pattern:?}: segment {segment:?} has more than one '*' (use one '*' per segment)"
            ));
        }
    }
    Ok(())
}

/// Matches `repository` against `pattern` segment by segment. A `*` segment matches exactly
/// one non-empty segment; a segment like `svc-*` matches segments with that prefix (and
/// suffix) and captures the rest. Returns the captures in order (`$1..$n`), or `None` when
/// the name does not match or the pattern is invalid ([`validate_pattern`]).
///
/// `match_pattern("team/*/*", "team/billing/api") == Some(vec!["billing", "api"])`.
pub fn match_pattern(pattern: &str, repository: &str) -> Option<Vec<String>> {
    if validate_pattern(pattern).is_err() {
        return None;
    }
    let pattern_segments: Vec<&str> = pattern.split('/').collect();
    let name_segments: Vec<&str> = repository.split('/').collect();
    if pattern_segments.len() != name_segments.len() {
        return None;
    }
    let mut captures = Vec::new();
    for (pat, name) in pattern_segments.iter().zip(&name_segments) {
        match pat.split_once('*') {
            None => {
                if pat != name {
                    return None;
                }
            }
            Some((prefix, suffix)) => {
                if name.len() <= prefix.len() + suffix.len()
                    || !name.starts_with(prefix)
                    || !name.ends_with(suffix)
                {
                    return None;
                }
                captures.push(name[prefix.len()..name.len() - suffix.len()].to_string());
            }
        }
    }
    Some(captures)
}

/// The literal start of `pattern` up to its first wildcard segment, e.g. `team/` for
/// `team/*/api` (and `team/svc-` for `team/svc-*`): a cheap filter before [`match_pattern`].
pub fn pattern_prefix(pattern: &str) -> &str {
    match pattern.find('*') {
        Some(index) => &pattern[..index],
        None => pattern,
    }
}

/// Replaces `$1..$n` (or `${1}`) in `template` with `captures` (1-based); `$$` is a
/// literal `$`. References past the last capture, and a `$` followed by anything else,
/// are kept as written so that mistakes stay visible in the resulting path.
///
/// `expand_captures("services/$1/$2/overlays/stg", &["billing".into(), "api".into()])`
/// is `services/billing/api/overlays/stg`.
pub fn expand_captures(template: &str, captures: &[String]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(index) = rest.find('$') {
        out.push_str(&rest[..index]);
        let after = &rest[index + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
            continue;
        }
        let (digits, consumed) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) if end > 0 && braced[..end].bytes().all(|b| b.is_ascii_digit()) => {
                    (&braced[..end], end + 2)
                }
                _ => ("", 0),
            }
        } else {
            let end = after
                .bytes()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = digits
            .parse::<usize>()
            .ok()
            .and_then(|n| n.checked_sub(1))
            .and_then(|i| captures.get(i));
        match value {
            Some(value) => {
                out.push_str(value);
                rest = &after[consumed..];
            }
            None => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The capture numbers `template` refers to, in order of appearance, under the grammar of
/// [`expand_captures`]: `$1`, `${1}`, and `$$` for a literal `$`. Any other `$` (a `$0`, a
/// `$` followed by a letter or by nothing, an unclosed `${`) is an error whose message quotes
/// it, so a pattern watch can refuse a target it would otherwise write to a wrong path.
///
/// `capture_references("services/$1/${2}/cost$$") == Ok(vec![1, 2])`.
pub fn capture_references(template: &str) -> Result<Vec<usize>, String> {
    let mut found = Vec::new();
    let mut rest = template;
    while let Some(index) = rest.find('$') {
        let after = &rest[index + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            rest = tail;
            continue;
        }
        let (digits, consumed) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => {
                    return Err(format!("\"${{\" without a closing \"}}\" in {template:?}"));
                }
            }
        } else {
            let end = after
                .bytes()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let quoted = &rest[index..index + 1 + consumed];
        let number = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.parse::<usize>().ok())
            .flatten();
        match number {
            Some(0) => {
                return Err(format!(
                    "{quoted:?} in {template:?}: captures count from $1"
                ));
            }
            Some(n) => found.push(n),
            None => {
                return Err(format!(
                    "a '$' in {template:?} must be followed by a capture number ($1, ${{1}}) or by another '$' (a literal '$')"
                ));
            }
        }
        rest = &after[consumed..];
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(list: &[&str]) -> Option<Vec<String>> {
        Some(list.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn match_pattern_whole_segments() {
        assert_eq!(
            match_pattern("team/*/*", "team/billing/api"),
            caps(&["billing", "api"])
        );
        assert_eq!(
            match_pattern("*/*/*", "org/billing/api"),
            caps(&["org", "billing", "api"])
        );
        assert_eq!(match_pattern("team/api", "team/api"), caps(&[]));
        assert_eq!(match_pattern("team/*", "team/billing/api"), None);
        assert_eq!(match_pattern("team/*/*", "team/api"), None);
        assert_eq!(match_pattern("team/*", "other/api"), None);
        assert_eq!(match_pattern("team/*/api", "team/x/worker"), None);
        assert_eq!(match_pattern("*", "api"), caps(&["api"]));
        assert_eq!(match_pattern("*", "a/b"), None);
    }

    #[test]
    fn match_pattern_partial_segments() {
        assert_eq!(
            match_pattern("team/svc-*/api", "team/svc-billing/api"),
            caps(&["billing"])
        );
        assert_eq!(
            match_pattern("team/*-api", "team/billing-api"),
            caps(&["billing"])
        );
        assert_eq!(match_pattern("team/svc-*", "team/svc-"), None);
        assert_eq!(match_pattern("team/svc-*", "team/app-x"), None);
        // Prefix and suffix must not overlap.
        assert_eq!(match_pattern("a*a", "a"), None);
        assert_eq!(match_pattern("a*a", "aba"), caps(&["b"]));
    }

    #[test]
    fn invalid_patterns_never_match() {
        assert!(validate_pattern("").is_err());
        assert!(validate_pattern("team//x").is_err());
        assert!(validate_pattern("team/**").is_err());
        assert!(validate_pattern("team/*/x").is_ok());
        assert_eq!(match_pattern("team/**", "team/x"), None);
        assert_eq!(match_pattern("team//*", "team//x"), None);
    }

    #[test]
    fn prefixes() {
        assert_eq!(pattern_prefix("team/*/api"), "team/");
        assert_eq!(pattern_prefix("team/svc-*"), "team/svc-");
        assert_eq!(pattern_prefix("*/x"), "");
        assert_eq!(pattern_prefix("team/api"), "team/api");
    }

    #[test]
    fn expand() {
        let c: Vec<String> = ["billing", "api", "eu"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            expand_captures("services/$1/$2/$3/overlays/stg", &c),
            "services/billing/api/eu/overlays/stg"
        );
        assert_eq!(expand_captures("x/${1}y/$2", &c), "x/billingy/api");
        assert_eq!(expand_captures("cost $$5 $1", &c), "cost $5 billing");
        assert_eq!(expand_captures("missing/$4/$0/$", &c), "missing/$4/$0/$");
        assert_eq!(expand_captures("brace/${x}/${}", &c), "brace/${x}/${}");
        assert_eq!(expand_captures("no captures", &[]), "no captures");
        let many: Vec<String> = (1..=12).map(|i| format!("c{i}")).collect();
        assert_eq!(expand_captures("$12-$1", &many), "c12-c1");
        // Non-ASCII text around references survives.
        assert_eq!(expand_captures("é/$1/ü", &c), "é/billing/ü");
    }

    #[test]
    fn capture_references_follow_the_expansion_grammar() {
        assert_eq!(
            capture_references("services/$1/$2/$3/overlays/stg"),
            Ok(vec![1, 2, 3])
        );
        assert_eq!(capture_references("x/${2}y/$1"), Ok(vec![2, 1]));
        assert_eq!(capture_references("cost $$5"), Ok(vec![]));
        assert_eq!(capture_references("plain/path"), Ok(vec![]));
        assert_eq!(capture_references("$12-$1"), Ok(vec![12, 1]));
        let zero = capture_references("a/$0/b").unwrap_err();
        assert!(
            zero.contains("\"$0\"") && zero.contains("from $1"),
            "{zero}"
        );
        for bad in ["a/$x", "trailing/$", "brace/${x}", "brace/${}", "open/${1"] {
            assert!(capture_references(bad).is_err(), "{bad} accepted");
        }
        // Whatever it accepts, expansion replaces completely.
        let caps: Vec<String> = (1..=3).map(|i| format!("c{i}")).collect();
        for ok in ["services/$1/${2}/$3", "a$$b/$1"] {
            assert!(capture_references(ok).is_ok());
            assert!(!expand_captures(ok, &caps).contains("$1"));
        }
    }
}
