//! What the local control plane applies from `manifests/` as shipped, and the identities that
//! come with it: any manifest file through API discovery, the installer's RBAC, and on the kas
//! control plane a kubeconfig that authenticates the operator as its own ServiceAccount.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::PostParams;

use super::{
    ControlPlaneError, LocalControlPlane, OPERATOR_NS, STATIC_NS, create_or_keep, io, wait_for,
};

impl LocalControlPlane {
    /// Waits until the ConfigMaps every pod's token volume projects exist in the project's
    /// namespaces (`kube-root-ca.crt` from the controller-manager, `openshift-service-ca.crt`
    /// from the service CA stand-in), as they do long before any pod on a running cluster. A pod
    /// started earlier backs off its mount retries up to two minutes, like the kubelet.
    pub(super) async fn wait_token_volume_sources(&self) -> Result<(), ControlPlaneError> {
        for ns in [STATIC_NS, OPERATOR_NS] {
            let cms: Api<ConfigMap> = Api::namespaced(self.client(), ns);
            for name in ["kube-root-ca.crt", "openshift-service-ca.crt"] {
                wait_for(
                    Duration::from_secs(120),
                    &format!("ConfigMap {ns}/{name}"),
                    || {
                        let cms = cms.clone();
                        async move {
                            match cms.get_opt(name).await {
                                Ok(Some(_)) => Ok(()),
                                Ok(None) => Err("not published yet".to_owned()),
                                Err(e) => Err(e.to_string()),
                            }
                        }
                    },
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Applies `manifests/02-rbac-operator.yaml` as it ships and writes a kubeconfig that
    /// authenticates as the operator's ServiceAccount (a token from the TokenRequest API, the
    /// API's address and CA from the admin kubeconfig).
    pub(super) async fn operator_identity(&self) -> Result<PathBuf, ControlPlaneError> {
        use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
        use k8s_openapi::api::core::v1::ServiceAccount;
        self.apply_manifest(
            "02-rbac-operator.yaml",
            include_str!("../../../../manifests/02-rbac-operator.yaml"),
        )
        .await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client(), OPERATOR_NS);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request("etcd-operator", &PostParams::default(), &request)
            .await?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| ControlPlaneError::Failed("no token issued for etcd-operator".into()))?;
        let token_path = self.dir.path().join("operator.token");
        std::fs::write(&token_path, token).map_err(io("writing the operator's token"))?;
        let admin = self.api.kubeconfig();
        let mut config = kube::config::Kubeconfig::read_from(admin)
            .map_err(|e| ControlPlaneError::Failed(format!("{}: {e}", admin.display())))?;
        for user in &mut config.auth_infos {
            user.auth_info = Some(kube::config::AuthInfo {
                token_file: Some(token_path.display().to_string()),
                ..Default::default()
            });
        }
        let path = self.dir.path().join("operator.kubeconfig");
        let text = serde_json::to_string(&config).map_err(|e| {
            ControlPlaneError::Failed(format!("writing the operator kubeconfig: {e}"))
        })?;
        std::fs::write(&path, text).map_err(io("writing the operator kubeconfig"))?;
        Ok(path)
    }

    /// `manifests/03-rbac-installer.yaml` as it ships: the installer pods' ServiceAccount, Role
    /// and RoleBinding (on a real API server the installer authenticates with that account's
    /// token, so the Role is what it may do).
    pub(super) async fn apply_installer_rbac(&self) -> Result<(), ControlPlaneError> {
        self.apply_manifest(
            "03-rbac-installer.yaml",
            include_str!("../../../../manifests/03-rbac-installer.yaml"),
        )
        .await
    }

    /// `kubectl apply --server-side -k <dir>` with the kas control plane's kubectl, as an admin
    /// applies `manifests/` (`--force-conflicts`: this control plane created some of the same
    /// objects already, with the same content, under another field manager).
    pub async fn apply_kustomization(
        &self,
        dir: &std::path::Path,
    ) -> Result<String, ControlPlaneError> {
        let kubectl = self.api.kubectl().ok_or_else(|| {
            ControlPlaneError::Failed("kubectl comes with the kas control plane only".into())
        })?;
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(self.api.kubeconfig())
            .args(["apply", "--server-side", "--force-conflicts", "-k"])
            .arg(dir)
            .output()
            .await
            .map_err(|e| {
                ControlPlaneError::Failed(format!("running {}: {e}", kubectl.display()))
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            Ok(text)
        } else {
            Err(ControlPlaneError::Failed(format!(
                "kubectl apply -k {} failed ({}): {text}",
                dir.display(),
                out.status
            )))
        }
    }

    /// Creates every object of one file of `manifests/` as it ships (kinds resolved through API
    /// discovery); objects that exist already are kept.
    pub async fn apply_manifest(&self, file: &str, text: &str) -> Result<(), ControlPlaneError> {
        use kube::api::DynamicObject;
        use kube::discovery::Scope;
        let failed = |what: String| ControlPlaneError::Failed(format!("manifests/{file}: {what}"));
        let docs: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(text).map_err(|e| failed(e.to_string()))?;
        let client = self.client();
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            let obj: DynamicObject =
                serde_json::from_value(doc).map_err(|e| failed(e.to_string()))?;
            let types = obj
                .types
                .clone()
                .ok_or_else(|| failed("a document without apiVersion/kind".into()))?;
            let gvk =
                kube::api::GroupVersionKind::try_from(&types).map_err(|e| failed(e.to_string()))?;
            let (resource, caps) = kube::discovery::pinned_kind(&client, &gvk).await?;
            let api: Api<DynamicObject> = match (&caps.scope, obj.metadata.namespace.as_deref()) {
                (Scope::Namespaced, Some(ns)) => {
                    Api::namespaced_with(client.clone(), ns, &resource)
                }
                (Scope::Namespaced, None) => {
                    return Err(failed(format!("{} without a namespace", types.kind)));
                }
                (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
            };
            create_or_keep(&api, &obj).await?;
        }
        Ok(())
    }
}
