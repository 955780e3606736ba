//! The real kubectl against the API stand-in, validation on: it reads the stand-in's OpenAPI v3
//! documents, finds `fieldValidation` there and sends `fieldValidation=Strict`, so
//! `kubectl create -f` and `kubectl apply -f` work, an unknown field is refused with
//! kube-apiserver's message, and issue 31's patch gets kube-apiserver's answer.
//!
//! kubectl is `$KUBECTL`, else the first `kubectl` on `PATH`; without one the test says SKIPPED.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube_testapi::TestApi;

fn kubectl_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KUBECTL") {
        return Some(PathBuf::from(p));
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
    dir: tempfile::TempDir,
}

impl Kubectl {
    /// Runs kubectl; (success, stdout, stderr).
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let out = tokio::process::Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .await
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    fn file(&self, name: &str, yaml: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, yaml).unwrap();
        path.to_string_lossy().into_owned()
    }

    /// `kubectl <verb> -f <yaml>`, asserting success.
    async fn ok(&self, verb: &str, name: &str, yaml: &str) -> String {
        let f = self.file(name, yaml);
        let (ok, out, err) = self.run(&[verb, "-f", &f]).await;
        assert!(ok, "kubectl {verb} -f {name} failed: {err}");
        out
    }
}

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: NAME\n  namespace: default\ndata:\n  a: \"VALUE\"\n";
const EC: &str = "apiVersion: etcd.static-operator.io/v1alpha1\nkind: EtcdCluster\nmetadata:\n  name: cluster\nspec:\n  logLevel: Debug\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_validates_on_the_stand_in() {
    let Some(bin) = kubectl_binary() else {
        eprintln!("SKIPPED kubectl_validates_on_the_stand_in: no kubectl ($KUBECTL or PATH)");
        return;
    };
    let api = TestApi::stand_in().await.unwrap();
    let k = Kubectl {
        bin,
        kubeconfig: api.kubeconfig().to_path_buf(),
        dir: tempfile::tempdir().unwrap(),
    };
    let (_, version, _) = k.run(&["version", "--client"]).await;
    eprintln!("kubectl: {}", version.lines().next().unwrap_or_default());

    let cm = CM.replace("NAME", "created").replace("VALUE", "1");
    k.ok("create", "cm.yaml", &cm).await;
    let bad = format!("{cm}bogus: 1\n").replace("created", "bad");
    let f = k.file("bad.yaml", &bad);
    let (ok, _, err) = k.run(&["create", "-f", &f]).await;
    assert!(!ok, "an unknown field was accepted");
    assert!(
        err.contains(
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"bogus\""
        ),
        "{err}"
    );
    let event = "apiVersion: v1\nkind: Event\nmetadata:\n  name: e1\n  namespace: default\ninvolvedObject:\n  kind: ConfigMap\n  name: created\n  namespace: default\nreason: Test\nmessage: hello\ntype: Normal\n";
    k.ok("create", "event.yaml", event).await;

    let applied = CM.replace("NAME", "applied");
    assert!(
        k.ok("apply", "a.yaml", &applied.replace("VALUE", "1"))
            .await
            .contains("created")
    );
    assert!(
        k.ok("apply", "a.yaml", &applied.replace("VALUE", "2"))
            .await
            .contains("configured")
    );
    let cms: Api<ConfigMap> = Api::namespaced(api.client(), "default");
    assert_eq!(cms.get("applied").await.unwrap().data.unwrap()["a"], "2");

    custom_resource(&k).await;
}

async fn custom_resource(k: &Kubectl) {
    let crd = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../manifests/01-crd.yaml");
    let (ok, _, err) = k.run(&["create", "-f", &crd.to_string_lossy()]).await;
    assert!(ok, "{err}");
    let f = k.file("ec.yaml", EC);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, _, err) = k.run(&["apply", "-f", &f]).await;
        if ok {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "EtcdCluster not served: {err}"
        );
    }
    let bad = k.file("ec-bad.yaml", &format!("{EC}  bogus: 1\n"));
    let (ok, _, err) = k.run(&["apply", "-f", &bad]).await;
    assert!(
        !ok && err.contains("strict decoding error: unknown field \"spec.bogus\""),
        "{err}"
    );
    let (ok, _, err) = k
        .run(&[
            "patch",
            "etcdcluster",
            "cluster",
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"clients":[{"name":"kas"}]}}"#,
        ])
        .await;
    assert!(!ok);
    assert_eq!(
        err.trim(),
        "The EtcdCluster \"cluster\" is invalid: \n* spec.clients[0].commonName: Required value\n* <nil>: Invalid value: null: some validation rules were not checked because the object was invalid; correct the existing errors to complete validation"
    );
}
