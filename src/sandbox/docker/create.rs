//! What a session's container is asked of the engine: its mounts, its
//! hardening, its limits and its own process, from a [`ContainerSpec`].

use std::collections::HashMap;

use bollard::models::{ContainerCreateBody, HostConfig, Mount, MountType};

use crate::sandbox::{ContainerSpec, Error, build, supervisor};

/// The engine's body for a container of `spec` under `runtime`, given the
/// volumes its image declares.
pub(super) fn body(
    spec: &ContainerSpec,
    declared: Vec<String>,
    runtime: Option<String>,
) -> Result<ContainerCreateBody, Error> {
    let mut tmpfs = HashMap::from([(
        "/tmp".to_string(),
        format!("rw,nosuid,nodev,size={}", spec.tmp_bytes),
    )]);
    super::image_paths::volumes_usable(&spec.image, &declared)?;
    for path in declared {
        // Covered as the engine will mount it.
        let clean = build::clean_volume_path(&path);
        tmpfs
            .entry(clean)
            .or_insert_with(|| format!("rw,nosuid,nodev,size={}", spec.tmp_bytes));
    }
    let memory = i64::try_from(spec.limits.memory_bytes).unwrap_or(i64::MAX);
    // Mounts, never the legacy binds: for a bind whose source is
    // missing, the engine (as root) would make it, and chown it, through
    // whatever symlinks the path holds by then; a mount refuses it.
    let bind = |source: &std::path::Path, target: &str, read_only: bool| Mount {
        typ: Some(MountType::BIND),
        source: Some(source.display().to_string()),
        target: Some(target.to_string()),
        read_only: Some(read_only),
        ..Default::default()
    };
    let mut workspace = bind(&spec.workspace, supervisor::WORKSPACE_PATH, false);
    if spec.workspace_slot {
        workspace.bind_options = Some(bollard::models::MountBindOptions {
            propagation: Some(bollard::models::MountBindOptionsPropagationEnum::RSLAVE),
            ..Default::default()
        });
    }
    let mut mounts = vec![workspace];
    if let Some(binary) = &spec.supervisor {
        mounts.push(bind(binary, supervisor::MOUNT_PATH, true));
        if let Some(idle) = &spec.idle {
            mounts.push(bind(idle, supervisor::idle::MOUNT_PATH, true));
        }
    }
    if let Some(dir) = &spec.socket_dir {
        mounts.push(bind(dir, supervisor::RUN_PATH, true));
    }
    let host_config = HostConfig {
        mounts: Some(mounts),
        network_mode: Some("none".into()),
        cap_drop: Some(vec!["ALL".into()]),
        // Only the supervisor (root in the container) holds these;
        // commands run as another user with none.
        cap_add: spec.supervisor.as_ref().map(|_| {
            supervisor::SUPERVISOR_CAPS
                .iter()
                .map(|c| c.to_string())
                .collect()
        }),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        tmpfs: Some(tmpfs),
        memory: Some(memory),
        // No swap beyond the memory limit.
        memory_swap: Some(memory),
        nano_cpus: Some(i64::try_from(spec.limits.nano_cpus).unwrap_or(i64::MAX)),
        pids_limit: Some(i64::try_from(spec.limits.pids).unwrap_or(i64::MAX)),
        // Open files per process, soft and hard (a command cannot raise
        // it): a session's worst case is pids × this, a stated share of
        // the host's table (see `sandbox::file_table`), not the engine's
        // inherited default.
        ulimits: Some(vec![bollard::models::ResourcesUlimits {
            name: Some("nofile".into()),
            soft: Some(crate::sandbox::file_table::NOFILE as i64),
            hard: Some(crate::sandbox::file_table::NOFILE as i64),
        }]),
        init: Some(true),
        runtime,
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        // The container's own process is ours, whatever the image's
        // ENTRYPOINT and CMD say (an explicit entrypoint drops the
        // image's CMD). With the supervisor mounted, the image needs
        // nothing but `sh`.
        entrypoint: Some(match (&spec.supervisor, &spec.idle) {
            (Some(_), Some(_)) => vec![supervisor::idle::MOUNT_PATH.into()],
            (Some(_), None) => vec![supervisor::MOUNT_PATH.into(), "idle".into()],
            (None, _) => vec!["sleep".into(), "infinity".into()],
        }),
        cmd: Some(Vec::new()),
        // An image's HEALTHCHECK would run a command of its own in the
        // sandbox, unasked, every few seconds.
        healthcheck: Some(bollard::models::HealthConfig {
            test: Some(vec!["NONE".into()]),
            ..Default::default()
        }),
        // With a supervisor, the container's own processes (init and
        // the idle keeper) run as root so that the supervisor exec may
        // hold the capabilities it needs; Docker gives an exec of any
        // other user none. Root here has no DAC override, so it starts
        // in `/`, not in a workspace it may not be able to enter.
        user: Some(match spec.supervisor {
            Some(_) => supervisor::SUPERVISOR_USER.to_string(),
            None => spec.user.clone(),
        }),
        working_dir: Some(match spec.supervisor {
            Some(_) => "/".to_string(),
            None => "/workspace".to_string(),
        }),
        env: Some(spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
        labels: Some(spec.labels.clone().into_iter().collect()),
        network_disabled: Some(true),
        host_config: Some(host_config),
        ..Default::default()
    };
    Ok(body)
}
