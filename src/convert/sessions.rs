//! Conversions of a session's info, its limits, and its reset and close
//! replies from the domain to the wire (and limits back).

use super::unix_seconds;
use crate::pb;
use crate::sandbox;
use crate::session::{Closed, Info};

impl From<Info> for pb::Session {
    fn from(i: Info) -> Self {
        pb::Session {
            session_id: i.id,
            workspace_path: i.workspace_path.display().to_string(),
            owns_workspace: i.owns_workspace,
            ttl_seconds: i.ttl.as_secs(),
            default_timeout_ms: i.default_timeout.as_millis() as u64,
            created_at: unix_seconds(i.created),
            last_used_at: unix_seconds(i.last_used),
            image: i.image,
            container_id: i.container_id.unwrap_or_default(),
            limits: Some(i.limits.into()),
            sandbox_status: i.sandbox_status.unwrap_or_default(),
            policy: Some(i.rules.into()),
            environment: i.environment.unwrap_or_default(),
            notes: i.notes,
            session_token: i.session_token.unwrap_or_default(),
            unattended: i.unattended,
            plan: i.plan.map(Into::into),
        }
    }
}

impl From<Closed> for pb::CloseSessionResponse {
    fn from(c: Closed) -> Self {
        let message = if c.workspace_removed {
            format!("closed session {}; its workspace is removed", c.id)
        } else {
            format!(
                "closed session {}; the workspace directory was left in place",
                c.id
            )
        };
        let report = (c.id.clone(), c.report).into();
        pb::CloseSessionResponse {
            session_id: c.id,
            workspace_removed: c.workspace_removed,
            message,
            report: Some(report),
        }
    }
}

impl From<pb::Limits> for sandbox::Limits {
    fn from(l: pb::Limits) -> Self {
        sandbox::Limits {
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            pids: l.pids,
            disk_bytes: l.disk_bytes,
            inodes: l.inodes,
        }
    }
}

impl From<sandbox::Limits> for pb::Limits {
    fn from(l: sandbox::Limits) -> Self {
        pb::Limits {
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            pids: l.pids,
            disk_bytes: l.disk_bytes,
            inodes: l.inodes,
        }
    }
}

impl From<crate::session::Reset> for pb::ResetSandboxResponse {
    fn from(r: crate::session::Reset) -> Self {
        pb::ResetSandboxResponse {
            session_id: r.id,
            container_id: r.container_id,
            message: r.message,
        }
    }
}
