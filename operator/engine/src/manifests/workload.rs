//! Which workload and container an image edit is aimed at.
//!
//! Place in the flow: the input to reading the current tag from Git. A
//! [`WorkloadTarget`] names the object (`kind`, `metadata.name`, optionally
//! `metadata.namespace`) and the container; [`WorkloadKind`] knows where each
//! kind keeps its pod spec so `locate` can walk to the `image` field.
//!
//! The target keeps `kind` as the text the user or the resource gave
//! (`Deployment`, `deploy`, `sts`, …) so callers can build it from a CLI
//! argument or a custom resource field directly; it is resolved to a
//! [`WorkloadKind`] when the search starts, and an unsupported kind is an
//! error then.

use std::fmt;
use std::str::FromStr;

/// Why a `KIND/NAME` argument could not be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadTargetError {
    #[error(
        "unsupported workload kind {0:?} (supported: Deployment, StatefulSet, DaemonSet, \
         ReplicaSet, Job, CronJob, Pod)"
    )]
    UnknownKind(String),
    #[error("workload must be given as KIND/NAME, e.g. deployment/web; got {0:?}")]
    Malformed(String),
    #[error("{0} must not be empty")]
    Empty(&'static str),
}

/// Workload kinds whose pod template can be edited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkloadKind {
    Deployment,
    StatefulSet,
    DaemonSet,
    ReplicaSet,
    Job,
    CronJob,
    Pod,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 7] = [
        Self::Deployment,
        Self::StatefulSet,
        Self::DaemonSet,
        Self::ReplicaSet,
        Self::Job,
        Self::CronJob,
        Self::Pod,
    ];

    /// The `kind:` value as written in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "Deployment",
            Self::StatefulSet => "StatefulSet",
            Self::DaemonSet => "DaemonSet",
            Self::ReplicaSet => "ReplicaSet",
            Self::Job => "Job",
            Self::CronJob => "CronJob",
            Self::Pod => "Pod",
        }
    }

    /// Mapping keys leading from the object root to its pod spec.
    pub fn pod_spec_path(self) -> &'static [&'static str] {
        match self {
            Self::Deployment
            | Self::StatefulSet
            | Self::DaemonSet
            | Self::ReplicaSet
            | Self::Job => &["spec", "template", "spec"],
            Self::CronJob => &["spec", "jobTemplate", "spec", "template", "spec"],
            Self::Pod => &["spec"],
        }
    }
}

impl From<WorkloadKind> for String {
    fn from(kind: WorkloadKind) -> Self {
        kind.as_str().to_owned()
    }
}

impl fmt::Display for WorkloadKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for WorkloadKind {
    type Err = WorkloadTargetError;

    /// Accepts the manifest spelling and kubectl's names, case-insensitively:
    /// `Deployment`, `deployments`, `deploy`, `sts`, `ds`, `rs`, `cj`, `po`, ….
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let kind = match s.to_ascii_lowercase().as_str() {
            "deployment" | "deployments" | "deploy" => Self::Deployment,
            "statefulset" | "statefulsets" | "sts" => Self::StatefulSet,
            "daemonset" | "daemonsets" | "ds" => Self::DaemonSet,
            "replicaset" | "replicasets" | "rs" => Self::ReplicaSet,
            "job" | "jobs" => Self::Job,
            "cronjob" | "cronjobs" | "cj" => Self::CronJob,
            "pod" | "pods" | "po" => Self::Pod,
            _ => return Err(WorkloadTargetError::UnknownKind(s.to_owned())),
        };
        Ok(kind)
    }
}

/// The container whose image is to be edited.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WorkloadTarget {
    /// Kind as given: the manifest spelling or a kubectl name (see
    /// [`WorkloadKind`]'s `FromStr`), matched case-insensitively.
    pub kind: String,
    /// `metadata.name` of the workload.
    pub name: String,
    /// Name of a container or init container of the workload.
    pub container: String,
    /// `metadata.namespace` to prefer when the same kind and name occur more
    /// than once; see `locate` for the exact rule. `Some("")` counts as none.
    pub namespace: Option<String>,
}

impl WorkloadTarget {
    pub fn new(
        kind: impl Into<String>,
        name: impl Into<String>,
        container: impl Into<String>,
    ) -> Self {
        Self {
            kind: kind.into(),
            name: name.into(),
            container: container.into(),
            namespace: None,
        }
    }

    pub fn with_namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Builds a target from CLI-style arguments: `workload` is `KIND/NAME`
    /// (`deployment/web`, `sts/db`); an empty namespace counts as none.
    pub fn from_args(
        workload: &str,
        container: &str,
        namespace: Option<&str>,
    ) -> Result<Self, WorkloadTargetError> {
        let (kind, name) = workload
            .split_once('/')
            .ok_or_else(|| WorkloadTargetError::Malformed(workload.to_owned()))?;
        if name.contains('/') {
            return Err(WorkloadTargetError::Malformed(workload.to_owned()));
        }
        if name.is_empty() {
            return Err(WorkloadTargetError::Empty("workload name"));
        }
        if container.is_empty() {
            return Err(WorkloadTargetError::Empty("container name"));
        }
        let kind: WorkloadKind = kind.parse()?;
        Ok(Self {
            kind: kind.into(),
            name: name.to_owned(),
            container: container.to_owned(),
            namespace: namespace.filter(|ns| !ns.is_empty()).map(str::to_owned),
        })
    }

    /// The kind, resolved.
    pub fn workload_kind(&self) -> Result<WorkloadKind, WorkloadTargetError> {
        self.kind.parse()
    }

    /// The kind in manifest spelling when it is supported, else as given.
    pub fn kind_name(&self) -> &str {
        match self.workload_kind() {
            Ok(kind) => kind.as_str(),
            Err(_) => &self.kind,
        }
    }
}

impl fmt::Display for WorkloadTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "container {:?} of {}/{}",
            self.container,
            self.kind_name(),
            self.name
        )?;
        if let Some(ns) = self.namespace.as_deref().filter(|ns| !ns.is_empty()) {
            write!(f, " in namespace {ns:?}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_manifest_and_kubectl_names() {
        for kind in WorkloadKind::ALL {
            assert_eq!(kind.as_str().parse::<WorkloadKind>(), Ok(kind));
        }
        assert_eq!("deploy".parse(), Ok(WorkloadKind::Deployment));
        assert_eq!("STS".parse(), Ok(WorkloadKind::StatefulSet));
        assert_eq!("cj".parse(), Ok(WorkloadKind::CronJob));
        assert_eq!(
            "Service".parse::<WorkloadKind>(),
            Err(WorkloadTargetError::UnknownKind("Service".into()))
        );
    }

    #[test]
    fn targets_parse_from_cli_arguments() {
        let t = WorkloadTarget::from_args("deployment/web", "app", Some("prod")).unwrap();
        assert_eq!(
            t,
            WorkloadTarget::new(WorkloadKind::Deployment, "web", "app").with_namespace("prod")
        );
        assert_eq!(
            t.to_string(),
            "container \"app\" of Deployment/web in namespace \"prod\""
        );
        assert_eq!(
            WorkloadTarget::from_args("cronjob/nightly", "job", Some(""))
                .unwrap()
                .namespace,
            None
        );
        assert!(matches!(
            WorkloadTarget::from_args("web", "app", None),
            Err(WorkloadTargetError::Malformed(_))
        ));
        assert!(matches!(
            WorkloadTarget::from_args("deploy/a/b", "app", None),
            Err(WorkloadTargetError::Malformed(_))
        ));
        assert_eq!(
            WorkloadTarget::from_args("deploy/", "app", None),
            Err(WorkloadTargetError::Empty("workload name"))
        );
        assert_eq!(
            WorkloadTarget::from_args("deploy/web", "", None),
            Err(WorkloadTargetError::Empty("container name"))
        );
    }
}
