//! What one container run starts from, under either runtime: the environment, command,
//! mounts and termination message file every run needs ([`common`]), then the host-binary
//! runtime's launch (the image table) or the runc runtime's (a bundle from the image store), and
//! the launch of an exec probe inside the running container.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Container;

use crate::env::container_env;
use crate::expand::expand_with;
use crate::mounts::BindMount;
use crate::runc::{RunRequest, RuncRuntime};
use crate::runner::Launch;
use crate::volumes::container_binds;
use crate::worker::PodRun;

/// Everything prepared for one run of a container.
pub(super) struct Prepared {
    pub(super) launch: Launch,
    pub(super) termination_file: PathBuf,
    pub(super) env: Vec<(String, String)>,
    /// The container's id under the runc runtime.
    pub(super) runc_id: Option<String>,
}

/// Why a container could not be set up: the waiting reason and message.
pub(super) type SetupError = (&'static str, String);

/// What every runtime starts a container run from.
struct Common {
    env: Vec<(String, String)>,
    command: Vec<String>,
    args: Vec<String>,
    binds: Vec<BindMount>,
    termination_file: PathBuf,
    container_dir: PathBuf,
    log_path: PathBuf,
}

fn common(run: &PodRun, c: &Container, restart: u32) -> Result<Common, SetupError> {
    let ctx = &run.ctx;
    let env =
        container_env(c, &run.facts).map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
    let vars = env.iter().cloned().collect();
    let expand = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter().flatten().map(|a| expand_with(a, &vars)).collect()
    };
    let (command, args) = (expand(&c.command), expand(&c.args));
    let mut binds = container_binds(ctx, &run.spec, &run.uid, c)
        .map_err(|e| ("CreateContainerConfigError", e.to_string()))?;
    let container_dir = ctx.pod_dir(&run.uid).join("containers").join(&c.name);
    std::fs::create_dir_all(&container_dir).map_err(|e| ("RunContainerError", e.to_string()))?;
    let termination_file = container_dir.join(format!("termination-log-{restart}"));
    std::fs::write(&termination_file, b"").map_err(|e| ("RunContainerError", e.to_string()))?;
    // Writable by the container's user, whoever it is (as the kubelet makes it).
    std::fs::set_permissions(&termination_file, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| ("RunContainerError", e.to_string()))?;
    binds.push(BindMount {
        source: termination_file.clone(),
        target: PathBuf::from(
            c.termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        read_only: false,
    });
    let log_path = ctx.log_path(
        &run.key.namespace,
        &run.key.name,
        &run.uid,
        &c.name,
        restart,
    );
    Ok(Common {
        env,
        command,
        args,
        binds,
        termination_file,
        container_dir,
        log_path,
    })
}

/// The host runtime: the image table maps the command to a host binary, unless the command
/// names a file in one of the container's volumes ([`volume_program`]).
fn host_launch(run: &PodRun, c: &Container, mut common: Common) -> Result<Prepared, SetupError> {
    let ctx = &run.ctx;
    let image = c.image.clone().unwrap_or_default();
    let refused = |e: crate::images::ImageError| ("CreateContainerError", e.to_string());
    let resolved = match volume_program(&common) {
        Some(program) => {
            // The image's binaries where the images scripts/build-images makes keep them, so the
            // program finds them on PATH as it would in the image.
            let entry = ctx.images.lookup(&image).map_err(refused)?;
            common
                .binds
                .extend(entry.binaries.iter().map(|(name, path)| BindMount {
                    source: path.clone(),
                    target: PathBuf::from("/usr/local/bin").join(name),
                    read_only: true,
                }));
            let mut args: Vec<String> = common.command.iter().skip(1).cloned().collect();
            args.extend(common.args.iter().cloned());
            crate::images::ResolvedCommand { program, args }
        }
        None => ctx
            .images
            .resolve(&image, &common.command, &common.args)
            .map_err(refused)?,
    };
    let launch = Launch {
        helper: ctx.helper.clone(),
        program: resolved.program,
        args: resolved.args,
        env: common.env.clone(),
        binds: common.binds,
        staging: ctx.staging_dir(),
        working_dir: c
            .working_dir
            .clone()
            .filter(|w| !w.is_empty())
            .map(PathBuf::from),
        log_path: Some(common.log_path),
        error_file: Some(common.termination_file.clone()),
        join: None,
        mount_proc: false,
    };
    Ok(Prepared {
        launch,
        termination_file: common.termination_file,
        env: common.env,
        runc_id: None,
    })
}

/// `command[0]` when it is an absolute path inside one of the container's volume mounts (a
/// binary an init container put in an `emptyDir`, as the etcd pod's gate hand-off does): a
/// container runs whatever file its command names in its own filesystem, volumes included, so
/// the image table is not asked.
fn volume_program(common: &Common) -> Option<PathBuf> {
    let program = PathBuf::from(common.command.first()?);
    let inside = common
        .binds
        .iter()
        .filter(|b| b.source != common.termination_file)
        .any(|b| program.starts_with(&b.target) && program != b.target);
    (program.is_absolute() && inside).then_some(program)
}

/// The environment `runc` itself runs with (the container's is in its bundle).
fn runc_env() -> Vec<(String, String)> {
    vec![(
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    )]
}

/// The runc runtime: a bundle from the node's image store, run by `runc run`.
async fn runc_launch(
    run: &PodRun,
    c: &Container,
    restart: u32,
    rt: &RuncRuntime,
    mut common: Common,
) -> Result<Prepared, SetupError> {
    let ctx = &run.ctx;
    // The stand-in's in-cluster credentials are a host file: the container sees it at the same
    // path, read-only.
    if let Some(k) = &ctx.kubeconfig
        && common.env.iter().any(|(n, _)| n == "KUBECONFIG")
    {
        common.binds.push(BindMount {
            source: k.clone(),
            target: k.clone(),
            read_only: true,
        });
    }
    let id = rt.container_id(&run.uid, &c.name, restart);
    let launch = rt
        .prepare(RunRequest {
            spec: &run.spec,
            container: c,
            command: common.command,
            args: common.args,
            env: common.env.clone(),
            binds: common.binds,
            bundle: common.container_dir.join(format!("bundle-{restart}")),
            id,
        })
        .await?;
    Ok(Prepared {
        launch: Launch {
            helper: ctx.helper.clone(),
            program: launch.program,
            args: launch.args,
            env: runc_env(),
            binds: Vec::new(),
            staging: ctx.staging_dir(),
            working_dir: None,
            log_path: Some(common.log_path),
            error_file: Some(common.termination_file.clone()),
            join: None,
            mount_proc: true,
        },
        termination_file: common.termination_file,
        env: common.env,
        runc_id: Some(launch.id),
    })
}

pub(super) async fn prepare(
    run: &PodRun,
    c: &Container,
    restart: u32,
) -> Result<Prepared, SetupError> {
    let common = common(run, c, restart)?;
    match &run.ctx.runc {
        None => host_launch(run, c, common),
        Some(rt) => runc_launch(run, c, restart, rt, common).await,
    }
}

/// The launch for an exec probe: same image, env and mounts, no log.
pub(super) fn exec_probe_launch(
    run: &PodRun,
    c: &Container,
    p: &Prepared,
    command: &[String],
    shim: i32,
) -> Result<Launch, String> {
    let (program, args, env) = match (&run.ctx.runc, &p.runc_id) {
        (Some(rt), Some(id)) => {
            let l = rt.exec(id, command);
            (l.program, l.args, runc_env())
        }
        _ => {
            let image = c.image.clone().unwrap_or_default();
            let resolved = run
                .ctx
                .images
                .resolve(&image, command, &[])
                .map_err(|e| e.to_string())?;
            (resolved.program, resolved.args, p.env.clone())
        }
    };
    Ok(Launch {
        program,
        args,
        env,
        binds: Vec::new(),
        log_path: None,
        error_file: None,
        join: Some(shim),
        ..p.launch.clone()
    })
}
