//! The Helm chart with the real helm (built from the pinned Go module) and the real
//! apiserver: lint, render with default values and with every option on, the values schema
//! refusing bad values, a server-side dry run of everything rendered, the security settings
//! of the pod, the env the Deployment passes being flags `imagewatch run` knows (and parses),
//! the RBAC of watched namespaces and of Argo CD refresh (rendered, and asked of the apiserver
//! with `kubectl auth can-i`), the CRDs being exactly what the binary generates, and the
//! release image's Dockerfile and binary.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, bail, ensure};
use imagewatch_e2e::{
    Ground, TestNamespace,
    chart::{chart_dir, documents, helm, kind, render},
    ground::random_suffix,
    ground::repo_root,
};
use serde_json::Value;

/// Values turning on every optional part of the chart.
const ALL_VALUES: &str = r#"
replicaCount: 3
shards: 12
leaseDuration: 20s
serviceAccount:
  annotations:
    eks.amazonaws.com/role-arn: arn:aws:iam::123456789012:role/imagewatch
watchNamespace: my-api
git:
  commitTemplate: "{{subject}}\n\n{{changes}}"
  batchWindow: 2s
  signingKey: {secretName: imagewatch-signing, key: signingKey}
caBundle: {configMap: corp-ca, key: bundle.pem}
registry:
  insecure: ["registry.internal:5000"]
  timeout: 45s
  maxTags: 500
registries:
  "*": {ratePerSecond: 10, burst: 20, metadataBudget: 50}
  registry.internal:5000: {insecure: true}
  docker.io: {ratePerSecond: 2}
webhook:
  enabled: true
  secretName: my-hooks
  distributionHost: registry.example.com
  ingress:
    enabled: true
    className: nginx
    annotations: {nginx.ingress.kubernetes.io/proxy-body-size: 1m}
    hosts:
      - host: imagewatch.example.com
        paths: [{path: /hooks, pathType: Prefix}]
    tls: [{secretName: imagewatch-tls, hosts: [imagewatch.example.com]}]
aws: {region: ap-northeast-1, endpointUrl: "https://vpce-0123.ecr.ap-northeast-1.vpce.amazonaws.com"}
sqs:
  queueUrl: https://sqs.ap-northeast-1.amazonaws.com/123456789012/imagewatch
  defaultAccount: "123456789012"
argocd: {namespace: gitops, refresh: true}
logFormat: text
logLevel: "info,imagewatch=debug"
metrics: {bindAddress: "::"}
hostNetwork: true
probeHost: 127.0.0.1
kubernetesApi: {host: 10.0.0.1, port: 443}
terminationGracePeriodSeconds: 90
serviceMonitor: {enabled: true, labels: {release: prometheus}}
grafanaDashboard: {enabled: true, annotations: {grafana_folder: GitOps}}
prometheusRule: {enabled: true, labels: {release: prometheus}, pushToCommitP99Seconds: 30}
podDisruptionBudget: {enabled: true, minAvailable: 2}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  webhookFrom: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}}]
  egress: [{}]
podAnnotations: {example.com/team: platform}
podLabels: {team: platform}
priorityClassName: ""
extraEnv: [{name: HTTPS_PROXY, value: "http://proxy.example.com:3128"}]
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector: {matchLabels: {app.kubernetes.io/name: imagewatch}}
"#;

fn values_file(dir: &Path, name: &str, text: &str) -> anyhow::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

fn one<'a>(docs: &'a [Value], k: &str) -> anyhow::Result<&'a Value> {
    let found = kind(docs, k);
    ensure!(found.len() == 1, "expected one {k}, found {}", found.len());
    Ok(found[0])
}

/// The env of the operator container, name → value (`fieldRef:<path>` for Downward API).
fn container_env(deployment: &Value) -> BTreeMap<String, String> {
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().unwrap_or_default().to_string();
            let value = match e["value"].as_str() {
                Some(v) => v.to_string(),
                None => format!(
                    "fieldRef:{}",
                    e["valueFrom"]["fieldRef"]["fieldPath"]
                        .as_str()
                        .unwrap_or_default()
                ),
            };
            (name, value)
        })
        .collect()
}

/// The RBAC objects of a render (Roles, ClusterRoles and their bindings), each as JSON text.
fn rbac(docs: &[Value]) -> BTreeSet<String> {
    let kinds = ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"];
    docs.iter()
        .filter(|d| kinds.iter().any(|k| d["kind"] == *k))
        .map(Value::to_string)
        .collect()
}

/// Whether a rule covers `resource`.
fn covers(rule: &Value, resource: &str) -> bool {
    rule["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r == resource)
}

/// The verbs a Role or ClusterRole grants on argoproj.io `applications`.
fn application_verbs(role: &Value) -> BTreeSet<String> {
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["apiGroups"] == serde_json::json!(["argoproj.io"]))
        .filter(|r| covers(r, "applications"))
        .flat_map(|r| r["verbs"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// Environment variables `imagewatch run` reads (from its `--help`).
fn run_env_names() -> anyhow::Result<BTreeSet<String>> {
    let out = Command::new(imagewatch_e2e::operator::binary())
        .args(["run", "--help"])
        .output()
        .context("running imagewatch run --help (build with `cargo build -p imagewatch`)")?;
    let help = String::from_utf8_lossy(&out.stdout);
    let names: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_string)
        .collect();
    ensure!(
        names.contains("IMAGEWATCH_WEBHOOK_ADDR"),
        "unexpected help:\n{help}"
    );
    Ok(names)
}

/// Checks the pod's security settings in a rendered Deployment.
fn assert_pod_security(deployment: &Value) {
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let sc = &pod["containers"][0]["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false, "{sc}");
    assert_eq!(sc["readOnlyRootFilesystem"], true, "{sc}");
    assert_eq!(sc["runAsNonRoot"], true, "{sc}");
    assert_eq!(sc["privileged"], false, "{sc}");
    assert_eq!(
        sc["capabilities"]["drop"],
        serde_json::json!(["ALL"]),
        "{sc}"
    );
    assert!(sc["capabilities"]["add"].is_null(), "{sc}");
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault", "{sc}");
    // A read-only root filesystem needs writable mounts for the clone cache and /tmp.
    let mounts: Vec<&str> = pod["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    assert!(mounts.contains(&"/var/cache/imagewatch"), "{mounts:?}");
    assert!(mounts.contains(&"/tmp"), "{mounts:?}");
}

/// The RBAC of a render stays least-privilege: no wildcard, no write verb on anything but
/// status, Events and Leases — except `patch` alone on PromotionPolicies (their finalizer) and
/// `patch` on Applications (the refresh annotation) in the Role in `argocd_namespace` or in
/// the release's ClusterRole.
fn assert_least_privilege(docs: &[Value], argocd_namespace: &str) {
    for role in kind(docs, "ClusterRole")
        .into_iter()
        .chain(kind(docs, "Role"))
    {
        for rule in role["rules"].as_array().into_iter().flatten() {
            let text = rule.to_string();
            assert!(!text.contains('*'), "wildcard in {text}");
            let writes = ["create", "update", "patch", "delete", "deletecollection"];
            let resources: Vec<&str> = rule["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let writes_something = rule["verbs"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|v| writes.contains(&v.as_str().unwrap_or_default()));
            if writes_something {
                // The one Secret write: the namespaced Role creating the peer token (HA).
                let peer_token = role["kind"] == "Role" && resources == ["secrets"];
                // The finalizers held while a pull request is open.
                let finalizer = resources == ["imagewatches", "promotionpolicies"]
                    && rule["verbs"] == serde_json::json!(["patch"]);
                // argocd.refresh: annotating Applications, in the Role in Argo CD's namespace
                // (watched namespaces) or the ClusterRole (the cluster-wide install, which
                // renders nothing in Argo CD's namespace).
                let refresh = ((role["kind"] == "Role"
                    && role["metadata"]["namespace"] == argocd_namespace)
                    || (role["kind"] == "ClusterRole"
                        && role["metadata"]["name"] == "iw-imagewatch"))
                    && rule["apiGroups"] == serde_json::json!(["argoproj.io"])
                    && resources == ["applications"]
                    && rule["verbs"] == serde_json::json!(["get", "list", "watch", "patch"]);
                assert!(
                    peer_token
                        || finalizer
                        || refresh
                        || resources
                            .iter()
                            .all(|r| r.ends_with("/status") || *r == "events" || *r == "leases"),
                    "write access beyond status, events and leases: {text}"
                );
            }
            assert!(
                !(resources.contains(&"secrets") && text.contains("\"watch\"")),
                "{text}"
            );
        }
    }
}

#[test]
fn lint_and_render_with_default_and_with_every_option() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let all = values_file(tmp.path(), "all.yaml", ALL_VALUES)?;
    step_lint_strict_with_default_and_every_option(&all)?;
    let known_env = run_env_names()?;
    step_default_values_render_the_minimal_install()?;
    let docs = documents(&render("iw", "imagewatch-system", &[&all])?)?;
    step_every_option_sets_the_deployment_and_an_env_run_accepts(&docs, &known_env, tmp.path())?;
    step_every_option_mounts_registries_and_ca_and_serves_the_webhook(&docs)?;
    step_every_option_renders_irsa_pdb_monitoring_and_network_policy(&docs)?;
    step_the_rbac_stays_least_privilege(&docs, tmp.path())
}

/// `helm lint --strict` passes with the default values and with the values file `all`.
fn step_lint_strict_with_default_and_every_option(all: &str) -> anyhow::Result<()> {
    let chart = chart_dir().display().to_string();
    for extra in [vec![], vec!["-f", all]] {
        let mut args = vec!["lint", "--strict", chart.as_str()];
        args.extend(extra.iter().copied());
        let (ok, out, err) = helm(&args)?;
        assert!(ok, "helm lint {extra:?} failed:\n{out}{err}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
    Ok(())
}

/// Default values: the minimal install, nothing in Argo CD's namespace, no optional env.
fn step_default_values_render_the_minimal_install() -> anyhow::Result<()> {
    // Default values: the minimal install.
    let docs = documents(&render("iw", "imagewatch-system", &[])?)?;
    let kinds: BTreeSet<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
    assert_eq!(
        kinds,
        BTreeSet::from([
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]),
        "default install"
    );
    let deployment = one(&docs, "Deployment")?;
    assert_pod_security(deployment);
    assert_eq!(deployment["spec"]["replicas"], 1);
    // One writer during upgrades without shards: the old Pod is gone before the new starts.
    assert_eq!(deployment["spec"]["strategy"]["type"], "Recreate");
    assert!(deployment["spec"]["template"]["spec"]["hostNetwork"].is_null());
    let env = container_env(deployment);
    assert_eq!(env["POD_NAMESPACE"], "fieldRef:metadata.namespace");
    assert_eq!(env["IMAGEWATCH_ARGOCD_NAMESPACE"], "argocd");
    // Argo CD is never needed: nothing is rendered in its namespace, which may not exist.
    for d in &docs {
        assert_ne!(
            d["metadata"]["namespace"], "argocd",
            "rendered in argocd: {d}"
        );
    }
    for absent in [
        "IMAGEWATCH_WEBHOOK_ADDR",
        "IMAGEWATCH_SQS_QUEUE_URL",
        "IMAGEWATCH_REGISTRIES_CONFIG",
    ] {
        assert!(
            !env.contains_key(absent),
            "{absent} set by default: {env:?}"
        );
    }
    let service = one(&docs, "Service")?;
    assert_eq!(
        service["spec"]["ports"].as_array().map(Vec::len),
        Some(1),
        "no webhook port by default: {service}"
    );
    Ok(())
}

/// Every option on: the Deployment's settings, and an env whose every variable `imagewatch run`
/// reads and parses.
fn step_every_option_sets_the_deployment_and_an_env_run_accepts(
    docs: &[Value],
    known_env: &BTreeSet<String>,
    tmp: &Path,
) -> anyhow::Result<()> {
    let deployment = one(docs, "Deployment")?;
    assert_pod_security(deployment);
    assert_eq!(deployment["spec"]["replicas"], 3);
    assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate");
    assert_eq!(
        deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        0
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    assert_eq!(pod["terminationGracePeriodSeconds"], 90);
    let probe = &pod["containers"][0]["readinessProbe"]["httpGet"];
    assert_eq!(probe["host"], "127.0.0.1");
    assert_eq!(probe["path"], "/readyz");
    let env = container_env(deployment);
    let expected = [
        ("POD_NAMESPACE", "fieldRef:metadata.namespace"),
        ("IMAGEWATCH_WEBHOOK_ADDR", "0.0.0.0:8081"),
        ("IMAGEWATCH_WEBHOOK_SECRET", "my-hooks"),
        ("IMAGEWATCH_DISTRIBUTION_HOST", "registry.example.com"),
        (
            "IMAGEWATCH_SQS_QUEUE_URL",
            "https://sqs.ap-northeast-1.amazonaws.com/123456789012/imagewatch",
        ),
        ("IMAGEWATCH_SQS_DEFAULT_ACCOUNT", "123456789012"),
        ("IMAGEWATCH_ARGOCD_NAMESPACE", "gitops"),
        ("IMAGEWATCH_ARGOCD_REFRESH", "true"),
        (
            "IMAGEWATCH_REGISTRIES_CONFIG",
            "/etc/imagewatch/registries/registries.yaml",
        ),
        ("IMAGEWATCH_NAMESPACE", "my-api"),
        ("IMAGEWATCH_INSECURE_REGISTRIES", "registry.internal:5000"),
        (
            "IMAGEWATCH_SIGNING_KEY",
            "/etc/imagewatch/signing/signingKey",
        ),
        ("IMAGEWATCH_BATCH_WINDOW", "2s"),
        ("IMAGEWATCH_REGISTRY_TIMEOUT", "45s"),
        ("IMAGEWATCH_MAX_TAGS", "500"),
        ("IMAGEWATCH_LOG_FORMAT", "text"),
        ("IMAGEWATCH_SHARDS", "12"),
        ("IMAGEWATCH_LEASE_DURATION", "20s"),
        ("RUST_LOG", "info,imagewatch=debug"),
        ("AWS_REGION", "ap-northeast-1"),
        ("HTTPS_PROXY", "http://proxy.example.com:3128"),
        ("IMAGEWATCH_METRICS_ADDR", "[::]:8080"),
        ("IMAGEWATCH_SHUTDOWN_TIMEOUT", "80s"),
        ("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
        ("KUBERNETES_SERVICE_PORT", "443"),
        ("SSL_CERT_FILE", "/etc/imagewatch/ca/bundle.pem"),
    ];
    for (name, value) in expected {
        assert_eq!(env.get(name).map(String::as_str), Some(value), "{name}");
    }
    // Every variable the chart sets for the operator is one `imagewatch run` reads.
    let foreign = [
        "POD_NAME",
        "POD_IP",
        "RUST_LOG",
        "AWS_REGION",
        "HTTPS_PROXY",
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
        "SSL_CERT_FILE",
    ];
    for name in env.keys() {
        assert!(
            known_env.contains(name) || foreign.contains(&name.as_str()),
            "the chart sets {name}, which `imagewatch run` does not read"
        );
    }
    // ... and `imagewatch run` parses the values: with this env it gets past argument
    // parsing (exit 2) and stops only because there is no cluster to talk to.
    let cache = tmp.join("cache");
    let out = Command::new(imagewatch_e2e::operator::binary())
        .arg("run")
        .env_clear()
        .envs(
            env.iter()
                .filter(|(_, v)| !v.starts_with("fieldRef:"))
                .map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .env("POD_NAMESPACE", "imagewatch-system")
        .env("IMAGEWATCH_CACHE_DIR", &cache)
        .env("IMAGEWATCH_METRICS_ADDR", "127.0.0.1:0")
        .env("KUBECONFIG", tmp.join("no-such-kubeconfig"))
        .output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(2),
        "imagewatch run refused the chart's env:\n{stderr}"
    );
    assert!(!out.status.success(), "ran without a cluster?\n{stderr}");
    Ok(())
}

/// Every option on: the registries ConfigMap the operator accepts, the CA bundle mounted, and
/// the webhook's ports and Ingress.
fn step_every_option_mounts_registries_and_ca_and_serves_the_webhook(
    docs: &[Value],
) -> anyhow::Result<()> {
    let deployment = one(docs, "Deployment")?;
    // The registries ConfigMap is a document the operator accepts.
    let configmap = kind(docs, "ConfigMap")
        .into_iter()
        .find(|m| m["data"]["registries.yaml"].is_string())
        .context("no ConfigMap with registries.yaml")?;
    let registries = configmap["data"]["registries.yaml"]
        .as_str()
        .context("no registries.yaml")?;
    let parsed = imagewatch::registry::parse_registries_config(registries)
        .map_err(|e| anyhow::anyhow!("operator refuses the rendered registries: {e}"))?;
    assert!(parsed.contains_key("registry.internal:5000"), "{parsed:?}");
    assert!(parsed.contains_key("*"), "{parsed:?}");
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(volumes.contains("iw-imagewatch-registries"), "{volumes}");
    assert!(volumes.contains("imagewatch-signing"), "{volumes}");
    // The CA bundle: the ConfigMap's key mounted read-only where SSL_CERT_FILE points.
    assert!(
        volumes.contains(
            r#""configMap":{"items":[{"key":"bundle.pem","path":"bundle.pem"}],"name":"corp-ca"}"#
        ),
        "{volumes}"
    );
    let mounts =
        deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"].to_string();
    assert!(
        mounts.contains(r#"{"mountPath":"/etc/imagewatch/ca","name":"ca-bundle","readOnly":true}"#),
        "{mounts}"
    );

    // Webhook: a container port, a Service port and an Ingress for /hooks on it.
    let service = one(docs, "Service")?;
    let ports = service["spec"]["ports"].to_string();
    assert!(
        ports.contains("\"targetPort\":\"webhook\""),
        "service ports: {ports}"
    );
    let ingress = one(docs, "Ingress")?;
    let path = &ingress["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(path["path"], "/hooks");
    assert_eq!(path["backend"]["service"]["port"]["name"], "webhook");
    assert_eq!(path["backend"]["service"]["name"], "iw-imagewatch");
    Ok(())
}

/// Every option on: the IRSA annotation, PDB, ServiceMonitor, PrometheusRule, dashboard and
/// NetworkPolicy.
fn step_every_option_renders_irsa_pdb_monitoring_and_network_policy(
    docs: &[Value],
) -> anyhow::Result<()> {
    // IRSA annotation, PDB, ServiceMonitor, NetworkPolicy.
    let sa = one(docs, "ServiceAccount")?;
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::123456789012:role/imagewatch"
    );
    assert_eq!(one(docs, "PodDisruptionBudget")?["spec"]["minAvailable"], 2);
    let monitor = one(docs, "ServiceMonitor")?;
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "metrics");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    let rule = one(docs, "PrometheusRule")?;
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    assert!(
        rule["spec"].to_string().contains("> 30"),
        "the p99 threshold value is used: {}",
        rule["spec"]
    );
    let dashboards: Vec<&Value> = kind(docs, "ConfigMap")
        .into_iter()
        .filter(|m| m["metadata"]["labels"]["grafana_dashboard"] == "1")
        .collect();
    assert_eq!(dashboards.len(), 1, "one dashboard ConfigMap");
    assert_eq!(
        dashboards[0]["metadata"]["annotations"]["grafana_folder"],
        "GitOps"
    );
    let policy = one(docs, "NetworkPolicy")?;
    assert_eq!(
        policy["spec"]["policyTypes"],
        serde_json::json!(["Ingress", "Egress"])
    );
    // Peers (replicas forwarding events), metrics, webhook.
    assert_eq!(policy["spec"]["ingress"].as_array().map(Vec::len), Some(3));
    Ok(())
}

/// The RBAC stays least-privilege with every option (`docs`) and by default, and without
/// Argo CD it grants no Application access and no Secret listing.
fn step_the_rbac_stays_least_privilege(docs: &[Value], tmp: &Path) -> anyhow::Result<()> {
    // The RBAC stays least-privilege, with every option (watched namespaces) and by default
    // (the ClusterRole).
    assert_least_privilege(docs, "gitops");
    let default_docs = documents(&render("iw", "imagewatch-system", &[])?)?;
    assert_least_privilege(&default_docs, "argocd");

    // Without Git locations from Argo CD (nor refresh): no Application access and no Secret
    // listing.
    let narrow = values_file(
        tmp,
        "narrow.yaml",
        "rbac: {gitFromArgocd: false, argocdApplications: false}\nargocd: {refresh: false}",
    )?;
    let docs = documents(&render("iw", "imagewatch-system", &[&narrow])?)?;
    let rules = one(&docs, "ClusterRole")?["rules"].clone();
    for role in kind(&docs, "ClusterRole")
        .into_iter()
        .chain(kind(&docs, "Role"))
    {
        let text = role["rules"].to_string();
        assert!(!text.contains("argoproj.io"), "{text}");
    }
    // Promotion gates alone keep `get` on Applications, without listing Secrets.
    let gates = values_file(tmp, "gates.yaml", "rbac: {gitFromArgocd: false}")?;
    let docs = documents(&render("iw", "imagewatch-system", &[&gates])?)?;
    let gate_rules = one(&docs, "ClusterRole")?["rules"].clone();
    assert!(
        gate_rules.to_string().contains("argoproj.io"),
        "{gate_rules}"
    );
    let gate_secrets = gate_rules
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["resources"] == serde_json::json!(["secrets"]))
        .context("no Secret rule")?;
    assert_eq!(gate_secrets["verbs"], serde_json::json!(["get"]));
    let secrets = rules
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["resources"] == serde_json::json!(["secrets"]))
        .context("no Secret rule")?;
    assert_eq!(secrets["verbs"], serde_json::json!(["get"]));
    Ok(())
}

#[test]
fn the_values_schema_refuses_bad_values() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let cases = [
        ("replicaCount: \"x\"", "replicaCount"),
        ("replicas: 2", "replicas"),
        ("logFormat: xml", "logFormat"),
        ("webhook: {port: 70000}", "port"),
        (
            "securityContext: {allowPrivilegeEscalation: true}",
            "allowPrivilegeEscalation",
        ),
        ("podSecurityContext: {runAsNonRoot: false}", "runAsNonRoot"),
        ("sqs: {defaultAccount: \"12\"}", "defaultAccount"),
        ("git: {batchWindow: soon}", "batchWindow"),
        ("registries: {ghcr.io: {ratePerSecnd: 5}}", "ratePerSecnd"),
        ("image: {pullPolicy: Sometimes}", "pullPolicy"),
    ];
    for (i, (values, mentions)) in cases.iter().enumerate() {
        let file = values_file(tmp.path(), &format!("bad-{i}.yaml"), values)?;
        let chart = chart_dir().display().to_string();
        let (ok, _, err) = helm(&["template", "iw", &chart, "-f", &file])?;
        assert!(!ok, "helm template accepted {values}");
        assert!(
            err.contains("schema") && err.contains(mentions),
            "{values}: error does not name {mentions:?}:\n{err}"
        );
    }
    Ok(())
}

#[test]
fn several_replicas_need_shards_and_get_the_lease_settings() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let chart = chart_dir().display().to_string();
    // Replicas without shards would all write every repository: refused with the fix.
    let unsharded = values_file(tmp.path(), "unsharded.yaml", "replicaCount: 3")?;
    let (ok, _, err) = helm(&["template", "iw", &chart, "-f", &unsharded])?;
    assert!(!ok, "helm template accepted replicas without shards");
    assert!(err.contains("shards > 0"), "{err}");

    let ha = values_file(
        tmp.path(),
        "ha.yaml",
        "replicaCount: 3\nshards: 12\nleaseDuration: 20s\nnetworkPolicy: {enabled: true}",
    )?;
    let docs = documents(&render("iw", "imagewatch-system", &[&ha])?)?;
    let deployment = one(&docs, "Deployment")?;
    assert_eq!(deployment["spec"]["replicas"], 3);
    let env = container_env(deployment);
    assert_eq!(env["IMAGEWATCH_SHARDS"], "12");
    assert_eq!(env["IMAGEWATCH_LEASE_DURATION"], "20s");
    assert_eq!(env["IMAGEWATCH_LEASE_PREFIX"], "iw-imagewatch");
    assert_eq!(env["POD_IP"], "fieldRef:status.podIP");
    assert_eq!(env["IMAGEWATCH_PEER_URL"], "http://$(POD_IP):8080");
    // Every variable the chart sets is one the binary reads (or a Downward API input).
    let known = run_env_names()?;
    for name in env.keys() {
        assert!(
            known.contains(name) || name == "POD_IP" || name == "RUST_LOG",
            "{name} is not read by imagewatch run"
        );
    }
    // The namespaced Role: Leases, plus creating the peer token Secret.
    let role = kind(&docs, "Role")
        .into_iter()
        .find(|r| r["metadata"]["name"] == "iw-imagewatch-leases")
        .context("no leases Role")?;
    let rules = role["rules"].to_string();
    assert!(
        rules.contains("\"leases\"") && rules.contains("\"delete\""),
        "{rules}"
    );
    assert!(rules.contains("\"secrets\""), "{rules}");
    // Replicas reach each other's metrics port.
    let policy = one(&docs, "NetworkPolicy")?;
    assert_eq!(policy["spec"]["ingress"].as_array().map(Vec::len), Some(2));
    assert!(
        policy["spec"]["ingress"][0]["from"][0]["podSelector"].is_object(),
        "{policy}"
    );

    // A single replica without shards has no Secret write at all.
    let docs = documents(&render("iw", "imagewatch-system", &[])?)?;
    for role in kind(&docs, "Role") {
        assert!(!role["rules"].to_string().contains("secrets"), "{role}");
    }
    Ok(())
}

/// `watchNamespace: team-b` narrows the RBAC exactly like `watchNamespaces: [team-b]`: a Role
/// and RoleBinding there, and no ClusterRole through which the operator could read the
/// Secrets of another namespace.
#[test]
fn the_single_watch_namespace_narrows_the_rbac_like_the_list() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let single = values_file(tmp.path(), "single.yaml", "watchNamespace: team-b")?;
    let list = values_file(tmp.path(), "list.yaml", "watchNamespaces: [team-b]")?;
    let single_docs = documents(&render("iw", "imagewatch-system", &[&single])?)?;
    let list_docs = documents(&render("iw", "imagewatch-system", &[&list])?)?;
    assert_eq!(rbac(&single_docs), rbac(&list_docs));
    for docs in [&single_docs, &list_docs] {
        assert!(kind(docs, "ClusterRole").is_empty(), "a ClusterRole");
        assert!(
            kind(docs, "ClusterRoleBinding").is_empty(),
            "a ClusterRoleBinding"
        );
        let env = container_env(one(docs, "Deployment")?);
        assert_eq!(env["IMAGEWATCH_NAMESPACE"], "team-b");
        for k in ["Role", "RoleBinding"] {
            let there = kind(docs, k)
                .into_iter()
                .filter(|d| d["metadata"]["name"] == "iw-imagewatch")
                .map(|d| d["metadata"]["namespace"].clone())
                .collect::<Vec<_>>();
            assert_eq!(there, ["team-b"], "{k}");
        }
        // Secrets: in team-b, and the webhook Secret in the release namespace.
        for role in kind(docs, "Role") {
            let mut rules = role["rules"].as_array().into_iter().flatten();
            if rules.any(|r| covers(r, "secrets")) {
                let ns = role["metadata"]["namespace"].as_str().unwrap_or_default();
                assert!(ns == "team-b" || ns == "imagewatch-system", "{role}");
            }
        }
    }

    // Both forms together: the union, each namespace once.
    let both = values_file(
        tmp.path(),
        "both.yaml",
        "watchNamespaces: [team-a, team-b]\nwatchNamespace: team-b",
    )?;
    let docs = documents(&render("iw", "imagewatch-system", &[&both])?)?;
    let namespaces: Vec<&str> = kind(&docs, "Role")
        .into_iter()
        .filter(|d| d["metadata"]["name"] == "iw-imagewatch")
        .filter_map(|d| d["metadata"]["namespace"].as_str())
        .collect();
    assert_eq!(
        namespaces.iter().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from(["team-a", "team-b"])
    );
    assert_eq!(namespaces.len(), 2, "{namespaces:?}");
    assert!(kind(&docs, "ClusterRole").is_empty());
    let env = container_env(one(&docs, "Deployment")?);
    assert_eq!(env["IMAGEWATCH_NAMESPACE"], "team-a,team-b");

    // With the allow-list the one ClusterRole reads Namespaces, nothing else.
    let allow = values_file(
        tmp.path(),
        "allow.yaml",
        "watchNamespace: team-b\nallowList: {enabled: true}",
    )?;
    let docs = documents(&render("iw", "imagewatch-system", &[&allow])?)?;
    for role in kind(&docs, "ClusterRole") {
        for rule in role["rules"].as_array().into_iter().flatten() {
            assert_eq!(
                rule["resources"],
                serde_json::json!(["namespaces"]),
                "{role}"
            );
        }
    }
    Ok(())
}

/// `argocd.refresh` (on by default): `get`, `list`, `watch` and `patch` on Applications, and
/// the flag's env. Cluster-wide (no watched namespaces) in the ClusterRole, with nothing
/// rendered in Argo CD's namespace, so a cluster without Argo CD installs the chart; with
/// watched namespaces in the Role in Argo CD's namespace only. Off: no write or watch of
/// Applications anywhere, and no `list` but the allow-list's (`gitFrom: ArgocdProject`).
#[test]
fn argo_cd_refresh_needs_no_argocd_namespace_cluster_wide() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let refresh: BTreeSet<String> = ["get", "list", "watch", "patch"]
        .into_iter()
        .map(str::to_string)
        .collect();
    let named = |docs: &[Value], k: &str, name: &str| {
        kind(docs, k)
            .into_iter()
            .find(|r| r["metadata"]["name"] == name)
            .cloned()
    };
    let roles = |docs: &[Value]| {
        kind(docs, "ClusterRole")
            .into_iter()
            .chain(kind(docs, "Role"))
            .cloned()
            .collect::<Vec<_>>()
    };

    // Cluster-wide: the ClusterRole, nothing in Argo CD's namespace.
    let cluster_wide = [
        ("default.yaml", ""),
        (
            "no-reads.yaml",
            "rbac: {gitFromArgocd: false, argocdApplications: false}",
        ),
        ("explicit.yaml", "argocd: {refresh: true}"),
        ("gitops.yaml", "argocd: {namespace: gitops}"),
    ];
    for (name, text) in cluster_wide {
        let file = values_file(tmp.path(), name, text)?;
        let docs = documents(&render("iw", "imagewatch-system", &[&file])?)?;
        let cluster_role = named(&docs, "ClusterRole", "iw-imagewatch")
            .with_context(|| format!("{text:?}: no ClusterRole"))?;
        assert_eq!(application_verbs(&cluster_role), refresh, "{text:?}");
        assert!(
            named(&docs, "Role", "iw-imagewatch-argocd").is_none(),
            "{text:?}: an argocd Role"
        );
        assert!(
            named(&docs, "RoleBinding", "iw-imagewatch-argocd").is_none(),
            "{text:?}: an argocd RoleBinding"
        );
        for d in &docs {
            let ns = &d["metadata"]["namespace"];
            assert!(ns != "argocd" && ns != "gitops", "{text:?}: {d}");
        }
        for role in kind(&docs, "Role") {
            assert!(application_verbs(role).is_empty(), "{text:?}: {role}");
        }
        let env = container_env(one(&docs, "Deployment")?);
        assert_eq!(env["IMAGEWATCH_ARGOCD_REFRESH"], "true", "{text:?}");
    }

    // Watched namespaces: the Role in Argo CD's namespace, nothing cluster-wide.
    let namespaced = [
        ("namespaced.yaml", "watchNamespaces: [team-b]"),
        ("single.yaml", "watchNamespace: team-b"),
        (
            "namespaced-no-reads.yaml",
            "watchNamespaces: [team-b]\nrbac: {gitFromArgocd: false, argocdApplications: false}",
        ),
    ];
    for (name, text) in namespaced {
        let file = values_file(tmp.path(), name, text)?;
        let docs = documents(&render("iw", "imagewatch-system", &[&file])?)?;
        let role = named(&docs, "Role", "iw-imagewatch-argocd")
            .with_context(|| format!("{text:?}: no argocd Role"))?;
        assert_eq!(role["metadata"]["namespace"], "argocd", "{text:?}");
        assert_eq!(application_verbs(&role), refresh, "{text:?}");
        let binding = named(&docs, "RoleBinding", "iw-imagewatch-argocd")
            .with_context(|| format!("{text:?}: no argocd RoleBinding"))?;
        assert_eq!(binding["metadata"]["namespace"], "argocd", "{text:?}");
        assert_eq!(binding["subjects"][0]["name"], "iw-imagewatch", "{text:?}");
        // Elsewhere at most `get` (watches without spec.git, promotion gates), and nothing on
        // Applications at cluster scope.
        for other in roles(&docs)
            .iter()
            .filter(|r| r["metadata"]["name"] != "iw-imagewatch-argocd")
        {
            let verbs = application_verbs(other);
            assert!(verbs.iter().all(|v| v == "get"), "{text:?}: {other}");
            if other["kind"] == "ClusterRole" {
                assert!(verbs.is_empty(), "{text:?}: {other}");
            }
        }
        let env = container_env(one(&docs, "Deployment")?);
        assert_eq!(env["IMAGEWATCH_ARGOCD_REFRESH"], "true", "{text:?}");
    }

    // Off: no `patch` or `watch` on Applications anywhere; `list` only for the allow-list's
    // gitFrom: ArgocdProject.
    let off = [
        ("off.yaml", "argocd: {refresh: false}", false),
        (
            "off-namespaced.yaml",
            "argocd: {refresh: false}\nwatchNamespaces: [team-b]",
            false,
        ),
        (
            "off-project.yaml",
            "argocd: {refresh: false}\nallowList: {enabled: true, gitFrom: ArgocdProject}",
            true,
        ),
        (
            "off-project-namespaced.yaml",
            "argocd: {refresh: false}\nallowList: {enabled: true, gitFrom: ArgocdProject}\n\
             watchNamespace: team-b",
            true,
        ),
    ];
    for (name, text, project) in off {
        let file = values_file(tmp.path(), name, text)?;
        let docs = documents(&render("iw", "imagewatch-system", &[&file])?)?;
        let mut listed = false;
        for role in roles(&docs) {
            let verbs = application_verbs(&role);
            for verb in ["patch", "watch"] {
                assert!(!verbs.contains(verb), "{text:?}: {verb} in {role}");
            }
            listed |= verbs.contains("list");
        }
        assert_eq!(listed, project, "{text:?}: list on Applications");
        let env = container_env(one(&docs, "Deployment")?);
        assert_eq!(env["IMAGEWATCH_ARGOCD_REFRESH"], "false", "{text:?}");
    }
    // Off with the ClusterRole: nothing at all in Argo CD's namespace either.
    let file = values_file(tmp.path(), "off.yaml", "argocd: {refresh: false}")?;
    let docs = documents(&render("iw", "imagewatch-system", &[&file])?)?;
    assert!(named(&docs, "Role", "iw-imagewatch-argocd").is_none());
    assert!(
        docs.iter().all(|d| d["metadata"]["namespace"] != "argocd"),
        "something rendered in argocd"
    );
    Ok(())
}

/// Whether the apiserver serves `resource` (plural) of `group`.
fn serves(ground: &Ground, group: &str, resource: &str) -> anyhow::Result<bool> {
    let (ok, out) =
        ground.kubectl_try(&["api-resources", "--api-group", group, "-o", "name"], None)?;
    Ok(ok && out.lines().any(|l| l.split('.').next() == Some(resource)))
}

/// Splits rendered YAML into documents, keeping each one's text.
fn split_documents(rendered: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in rendered.lines() {
        if line == "---" {
            docs.push(String::new());
        } else if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.into_iter()
        .filter(|d| d.lines().any(|l| l.starts_with("kind:")))
        .collect()
}

#[tokio::test]
async fn the_rendered_chart_passes_a_server_side_dry_run() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    let ns = TestNamespace::create(ground, "chart").await?;
    // With watched namespaces, the chart's Roles outside the release namespace (Argo CD's,
    // the watched one's) need their namespaces to exist.
    let argocd = TestNamespace::create(ground, "chart-argocd").await?;
    let watched = TestNamespace::create(ground, "chart-watched").await?;
    // The cluster-wide install renders nothing in Argo CD's namespace: it passes with one
    // that does not exist (a cluster without Argo CD).
    let absent = format!("chart-no-argocd-{}", random_suffix());
    let (exists, _) = ground.kubectl_try(&["get", "namespace", &absent], None)?;
    ensure!(!exists, "namespace {absent} exists");
    let tmp = tempfile::tempdir()?;
    let all = values_file(tmp.path(), "all.yaml", ALL_VALUES)?;
    let no_argocd = values_file(
        tmp.path(),
        "no-argocd.yaml",
        &format!("argocd: {{namespace: {absent}, refresh: true}}"),
    )?;
    let all_namespaces = values_file(
        tmp.path(),
        "all-namespaces.yaml",
        &format!(
            "argocd: {{namespace: {}}}\nwatchNamespace: {}",
            argocd.name, watched.name
        ),
    )?;
    let monitors = serves(ground, "monitoring.coreos.com", "servicemonitors")?;
    let rules = serves(ground, "monitoring.coreos.com", "prometheusrules")?;
    let release = format!("chart-{}", random_suffix());
    for values in [
        vec![],
        vec![no_argocd.as_str()],
        vec![all.as_str(), all_namespaces.as_str()],
    ] {
        let rendered = render(&release, &ns.name, &values)?;
        let docs: Vec<String> = split_documents(&rendered)
            .into_iter()
            .filter(|d| monitors || !d.contains("\nkind: ServiceMonitor\n"))
            .filter(|d| rules || !d.contains("\nkind: PrometheusRule\n"))
            .collect();
        let count = docs.len();
        let manifest = docs.join("---\n");
        let (ok, out) = ground.kubectl_try(
            &["apply", "--dry-run=server", "-o", "name", "-f", "-"],
            Some(&manifest),
        )?;
        ensure!(
            ok,
            "server-side dry run refused the chart {values:?}:\n{out}"
        );
        assert_eq!(out.lines().count(), count, "{out}");
    }
    Ok(())
}

/// The chart's RBAC applied to the apiserver, asked with `kubectl auth can-i` as the
/// ServiceAccount: `watchNamespace` and `watchNamespaces` both let it read Secrets in the
/// watched namespace (and its webhook Secret) and nowhere else, and refresh Applications in
/// Argo CD's namespace only. The cluster-wide install applies with an Argo CD namespace that
/// does not exist and refreshes Applications through its ClusterRole; with `argocd.refresh:
/// false` it can neither patch nor watch them anywhere.
#[tokio::test]
async fn the_watched_namespace_rbac_holds_on_the_apiserver() -> anyhow::Result<()> {
    let ground = Ground::get()?;
    ground.install_crds()?;
    // `kubectl auth can-i` resolves Applications through the real Argo CD's CRD.
    imagewatch_e2e::argocd::ArgoCd::get(ground)?;
    let op = TestNamespace::create(ground, "chart-op").await?;
    let watched = TestNamespace::create(ground, "chart-team-b").await?;
    let other = TestNamespace::create(ground, "chart-other").await?;
    let argocd = TestNamespace::create(ground, "chart-argocd").await?;
    let argocd_value = format!("argocd.namespace={}", argocd.name);
    let forms = [
        format!("watchNamespace={}", watched.name),
        format!("watchNamespaces={{{}}}", watched.name),
    ];
    for form in &forms {
        let release = format!("chart-{}", random_suffix());
        ground.install_chart_rbac_with(&release, &op.name, &[form, &argocd_value])?;
        let who = format!("system:serviceaccount:{}:{release}-imagewatch", op.name);
        let can_i = |args: &[&str]| -> anyhow::Result<bool> {
            let mut all = vec!["auth", "can-i", "--as", who.as_str()];
            all.extend(args);
            let (_, out) = ground.kubectl_try(&all, None)?;
            Ok(out.trim_start().starts_with("yes"))
        };
        assert!(can_i(&["get", "secrets", "-n", &watched.name])?, "{form}");
        assert!(can_i(&["get", "secrets", "-n", &op.name])?, "{form}");
        assert!(!can_i(&["get", "secrets", "-n", &other.name])?, "{form}");
        assert!(!can_i(&["get", "secrets", "-n", &argocd.name])?, "{form}");
        assert!(!can_i(&["get", "secrets", "--all-namespaces"])?, "{form}");
        let watches = "imagewatches.imagewatch.dev";
        assert!(can_i(&["list", watches, "-n", &watched.name])?, "{form}");
        assert!(!can_i(&["list", watches, "-n", &other.name])?, "{form}");
        assert!(!can_i(&["list", watches, "--all-namespaces"])?, "{form}");
        let application = "applications.argoproj.io";
        for verb in ["patch", "watch", "list"] {
            assert!(can_i(&[verb, application, "-n", &argocd.name])?, "{form}");
            assert!(!can_i(&[verb, application, "-n", &watched.name])?, "{form}");
            assert!(!can_i(&[verb, application, "--all-namespaces"])?, "{form}");
        }
    }

    // Cluster-wide, with an Argo CD namespace that does not exist: the RBAC applies (nothing
    // is rendered there), and the ClusterRole grants the refresh verbs unless refresh is off.
    let absent = format!("chart-no-argocd-{}", random_suffix());
    let (exists, _) = ground.kubectl_try(&["get", "namespace", &absent], None)?;
    ensure!(!exists, "namespace {absent} exists");
    let absent_value = format!("argocd.namespace={absent}");
    for refresh in [true, false] {
        let refresh_value = format!("argocd.refresh={refresh}");
        let release = format!("chart-{}", random_suffix());
        let name = format!("{release}-imagewatch");
        let applied =
            ground.install_chart_rbac_with(&release, &op.name, &[&absent_value, &refresh_value]);
        let checked = applied.and_then(|()| {
            let who = format!("system:serviceaccount:{}:{name}", op.name);
            let can_i = |args: &[&str]| -> anyhow::Result<bool> {
                let mut all = vec!["auth", "can-i", "--as", who.as_str()];
                all.extend(args);
                let (_, out) = ground.kubectl_try(&all, None)?;
                Ok(out.trim_start().starts_with("yes"))
            };
            let form = format!("cluster-wide, refresh {refresh}");
            ensure!(can_i(&["get", "secrets", "-n", &other.name])?, "{form}");
            let watches = "imagewatches.imagewatch.dev";
            ensure!(can_i(&["list", watches, "--all-namespaces"])?, "{form}");
            let application = "applications.argoproj.io";
            ensure!(can_i(&["get", application, "-n", &absent])?, "{form}");
            for verb in ["patch", "watch", "list"] {
                for place in [["-n", absent.as_str()], ["-n", other.name.as_str()]] {
                    let mut args = vec![verb, application];
                    args.extend(place);
                    ensure!(can_i(&args)? == refresh, "{form}: {args:?}");
                }
                let all = [verb, application, "--all-namespaces"];
                ensure!(can_i(&all)? == refresh, "{form}: {verb}");
            }
            Ok(())
        });
        // The ClusterRole and its binding outlive the test's namespaces.
        ground.kubectl_try(
            &[
                "delete",
                "--ignore-not-found",
                &format!("clusterrolebinding/{name}"),
                &format!("clusterrole/{name}"),
            ],
            None,
        )?;
        checked?;
    }
    Ok(())
}

#[test]
fn the_chart_crds_are_the_generated_ones() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = Command::new(imagewatch_e2e::operator::binary())
        .args(["crds", "--out-dir"])
        .arg(tmp.path())
        .output()
        .context("running imagewatch crds (build with `cargo build -p imagewatch`)")?;
    ensure!(
        out.status.success(),
        "imagewatch crds: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names = |dir: &Path| -> anyhow::Result<BTreeSet<String>> {
        Ok(std::fs::read_dir(dir)?
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect())
    };
    let chart_crds = chart_dir().join("crds");
    assert_eq!(names(&chart_crds)?, names(tmp.path())?);
    for name in names(tmp.path())? {
        let generated = std::fs::read(tmp.path().join(&name))?;
        let committed = std::fs::read(chart_crds.join(&name))?;
        assert!(
            generated == committed,
            "charts/imagewatch/crds/{name} differs from `imagewatch crds` output: run `just generate`"
        );
    }
    Ok(())
}

/// The binary the release image ships, as its Dockerfile builds and copies it.
#[test]
fn the_release_image_ships_the_release_binary() -> anyhow::Result<()> {
    let dockerfile = std::fs::read_to_string(repo_root().join("operator/Dockerfile"))?;
    let lines: Vec<&str> = dockerfile
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let froms: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    assert_eq!(froms.len(), 2, "multi-stage: {froms:?}");
    assert_eq!(froms[0], "FROM rust:1-bookworm AS builder");
    let runtime = froms[1].trim_start_matches("FROM ").to_string();
    assert!(
        runtime.starts_with("debian:bookworm-slim") || runtime.starts_with("gcr.io/distroless/"),
        "runtime image {runtime}"
    );
    let builder_workdir = lines
        .iter()
        .take_while(|l| !l.starts_with(&format!("FROM {runtime}")))
        .filter_map(|l| l.strip_prefix("WORKDIR "))
        .last()
        .context("no WORKDIR in the builder stage")?;
    assert!(
        dockerfile.contains("cargo build --release --locked -p imagewatch"),
        "the builder runs the release build"
    );
    let copy = lines
        .iter()
        .find(|l| l.starts_with("COPY --from=builder "))
        .context("no COPY --from=builder")?;
    let parts: Vec<&str> = copy.split_whitespace().collect();
    assert_eq!(parts.len(), 4, "{copy}");
    let (source, dest) = (parts[2], parts[3]);
    assert_eq!(dest, "/imagewatch");
    let relative = source
        .strip_prefix(builder_workdir)
        .map(|s| s.trim_start_matches('/'))
        .context("COPY source outside the builder's WORKDIR")?;
    assert_eq!(relative, "target/release/imagewatch");
    let user = lines
        .iter()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .context("no USER")?;
    assert!(user == "65532" || user.starts_with("65532:"), "USER {user}");
    assert_eq!(
        lines.iter().rfind(|l| l.starts_with("ENTRYPOINT ")),
        Some(&"ENTRYPOINT [\"/imagewatch\"]")
    );

    // The same binary here: target/release/imagewatch, built once when absent.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let binary = target.join(relative.trim_start_matches("target/"));
    if !binary.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--release", "--locked", "-p", "imagewatch"])
            .current_dir(repo_root())
            .status()
            .context("cargo build --release")?;
        ensure!(status.success(), "cargo build --release failed");
    }
    let out = Command::new(&binary).arg("--version").output()?;
    ensure!(
        out.status.success(),
        "{} --version failed",
        binary.display()
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("imagewatch {}", env!("CARGO_PKG_VERSION"))
    );

    // Every shared library it links is one the runtime stage provides.
    let ldd = Command::new("ldd").arg(&binary).output()?;
    let provided = [
        "linux-vdso.so",
        "libssl.so.3",
        "libcrypto.so.3",
        "libz.so.1",
        "libgcc_s.so.1",
        "libm.so.6",
        "libc.so.6",
        "ld-linux",
    ];
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let lib = line.split_whitespace().next().unwrap_or_default();
        let lib = lib.rsplit('/').next().unwrap_or_default();
        if !provided.iter().any(|p| lib.starts_with(p)) {
            bail!("the release binary links {lib}, which the runtime image may not have");
        }
    }
    for package in ["libssl3", "zlib1g", "ca-certificates"] {
        assert!(
            dockerfile.contains(package),
            "the runtime stage installs {package}"
        );
    }
    Ok(())
}
