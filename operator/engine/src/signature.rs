//! What a signature check found, as the status reports it: the format a signature came in,
//! the verdict on one image digest; a candidate tag refused for it is a
//! [`crate::refused::Refused`]. Data and words only; the keys and the checks are in the
//! operator's `signature` module.

/// Which format a verified signature came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// The classic `sha256-<hex>.sig` tag.
    Classic,
    /// A Sigstore bundle through the referrers fallback tag.
    Bundle,
}

impl Format {
    /// Name used in status messages and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Classic => "classic",
            Format::Bundle => "bundle",
        }
    }
}

/// What checking one image digest found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A signature verified with the key of this fingerprint.
    Verified { format: Format, key: String },
    /// No signature of the image exists in either format.
    Missing,
    /// Signatures exist, none verifies with the configured keys; why (the first one).
    Invalid(String),
}

impl Verdict {
    /// The `outcome` label of `imagewatch_signature_checks_total`.
    pub fn outcome(&self) -> &'static str {
        match self {
            Verdict::Verified { .. } => "verified",
            Verdict::Missing => "missing",
            Verdict::Invalid(_) => "invalid",
        }
    }
}
