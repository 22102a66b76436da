//! A candidate tag that was not written, and why: its signature does not verify
//! (`spec.verify`) or its image lacks a wanted platform (`spec.tags.platforms`). The status
//! reports it in `status.refused`, an Event and, when no tag qualifies, the `Ready` reason.

use imagewatch_crd::conditions::reason;

use crate::platforms::{self, Platform};
use crate::signature::Verdict;

/// Why a candidate tag was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `spec.verify`: the signature verdict, `Missing` or `Invalid(…)`.
    Signature(Verdict),
    /// `spec.tags.platforms`: the wanted platforms the image lacks, and those it provides.
    PlatformMissing {
        missing: Vec<Platform>,
        provided: Vec<Platform>,
    },
}

/// A candidate tag refused, with its manifest digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub tag: String,
    pub digest: String,
    pub why: Refusal,
}

impl Refused {
    /// The condition reason: `SignatureMissing`, `SignatureInvalid` or `PlatformMissing`.
    pub fn reason(&self) -> &'static str {
        match &self.why {
            Refusal::Signature(Verdict::Missing) => reason::SIGNATURE_MISSING,
            Refusal::Signature(_) => reason::SIGNATURE_INVALID,
            Refusal::PlatformMissing { .. } => reason::PLATFORM_MISSING,
        }
    }

    /// The metric label of the reconcile error this refusal ends in.
    pub fn category(&self) -> &'static str {
        match &self.why {
            Refusal::Signature(_) => "signature",
            Refusal::PlatformMissing { .. } => "platform_missing",
        }
    }

    /// Why, in words.
    pub fn message(&self) -> String {
        match &self.why {
            Refusal::Signature(Verdict::Missing) => format!(
                "tag {} ({}) has no cosign signature (neither a sha256-<digest>.sig tag nor a Sigstore bundle referrer)",
                self.tag, self.digest
            ),
            Refusal::Signature(Verdict::Invalid(why)) => {
                format!("tag {} ({}): {why}", self.tag, self.digest)
            }
            Refusal::Signature(Verdict::Verified { .. }) => {
                format!("tag {} is verified", self.tag)
            }
            Refusal::PlatformMissing { missing, provided } => format!(
                "tag {} ({}) lacks platform {} (its image provides {})",
                self.tag,
                self.digest,
                platforms::list(missing),
                platforms::list(provided)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_refused_for_a_platform_names_what_is_missing_and_what_is_there() {
        let refused = Refused {
            tag: "v2".into(),
            digest: "sha256:aa".into(),
            why: Refusal::PlatformMissing {
                missing: Platform::parse_all(&["linux/arm64"]).unwrap(),
                provided: Platform::parse_all(&["linux/amd64"]).unwrap(),
            },
        };
        assert_eq!(refused.reason(), "PlatformMissing");
        assert_eq!(refused.category(), "platform_missing");
        assert_eq!(
            refused.message(),
            "tag v2 (sha256:aa) lacks platform linux/arm64 (its image provides linux/amd64)"
        );
        let unsigned = Refused {
            why: Refusal::Signature(Verdict::Missing),
            ..refused
        };
        assert_eq!(unsigned.reason(), "SignatureMissing");
        assert_eq!(unsigned.category(), "signature");
    }
}
