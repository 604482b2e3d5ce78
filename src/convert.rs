//! Every conversion between generated wire types and domain types. Nothing
//! outside this module and `service` sees a `pb` type.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::pb;
use crate::session::{Closed, Info, NewSession};
use crate::workspace::walk::{DirEntry, Kind};
use crate::workspace::{
    CreateOutput, EditOutput, EditSpec, FindOutput, ListOutput, ReadOutput, SearchOutput,
    SearchQuery,
};

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl From<pb::CreateSessionRequest> for NewSession {
    fn from(r: pb::CreateSessionRequest) -> Self {
        NewSession {
            workspace_path: (!r.workspace_path.is_empty()).then_some(r.workspace_path),
            ttl: Duration::from_secs(r.ttl_seconds),
        }
    }
}

impl From<Info> for pb::Session {
    fn from(i: Info) -> Self {
        pb::Session {
            session_id: i.id,
            workspace_path: i.workspace_path.display().to_string(),
            owns_workspace: i.owns_workspace,
            ttl_seconds: i.ttl.as_secs(),
            created_at: unix_seconds(i.created),
            last_used_at: unix_seconds(i.last_used),
        }
    }
}

impl From<Closed> for pb::CloseSessionResponse {
    fn from(c: Closed) -> Self {
        let message = if c.workspace_removed {
            format!("closed session {}; its workspace was removed", c.id)
        } else {
            format!(
                "closed session {}; the workspace directory was left in place",
                c.id
            )
        };
        pb::CloseSessionResponse {
            session_id: c.id,
            workspace_removed: c.workspace_removed,
            message,
        }
    }
}

impl From<ReadOutput> for pb::ReadFileResponse {
    fn from(o: ReadOutput) -> Self {
        pb::ReadFileResponse {
            path: o.path,
            content: o.content,
            first_line: o.first_line,
            last_line: o.last_line,
            total_lines: o.total_lines,
            sha256: o.sha256,
            truncated: o.truncated,
            size_bytes: o.size_bytes,
            message: o.message,
        }
    }
}

impl From<CreateOutput> for pb::CreateFileResponse {
    fn from(o: CreateOutput) -> Self {
        pb::CreateFileResponse {
            path: o.path,
            sha256: o.sha256,
            message: o.message,
            total_lines: o.total_lines,
        }
    }
}

impl From<pb::Edit> for EditSpec {
    fn from(e: pb::Edit) -> Self {
        EditSpec {
            old: e.old_string,
            new: e.new_string,
            replace_all: e.replace_all,
        }
    }
}

impl From<EditOutput> for pb::EditFileResponse {
    fn from(o: EditOutput) -> Self {
        pb::EditFileResponse {
            path: o.path,
            replacements: o.replacements,
            first_changed_line: o.first_changed_line,
            line_delta: o.line_delta,
            diff: o.diff,
            sha256: o.sha256,
            message: o.message,
            diff_truncated: o.diff_truncated,
        }
    }
}

impl From<Kind> for pb::dir_entry::Kind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::File => pb::dir_entry::Kind::File,
            Kind::Dir => pb::dir_entry::Kind::Dir,
            Kind::Symlink => pb::dir_entry::Kind::Symlink,
            Kind::Other => pb::dir_entry::Kind::Other,
        }
    }
}

impl From<DirEntry> for pb::DirEntry {
    fn from(e: DirEntry) -> Self {
        pb::DirEntry {
            name: e.name,
            kind: pb::dir_entry::Kind::from(e.kind).into(),
            size_bytes: e.size,
        }
    }
}

impl From<ListOutput> for pb::ListDirResponse {
    fn from(o: ListOutput) -> Self {
        pb::ListDirResponse {
            path: o.path,
            entries: o.entries.into_iter().map(Into::into).collect(),
            truncated: o.truncated,
        }
    }
}

impl From<FindOutput> for pb::FindFilesResponse {
    fn from(o: FindOutput) -> Self {
        pb::FindFilesResponse {
            paths: o.paths,
            truncated: o.truncated,
        }
    }
}

impl From<pb::SearchFilesRequest> for SearchQuery {
    fn from(r: pb::SearchFilesRequest) -> Self {
        SearchQuery {
            pattern: r.pattern,
            path: r.path,
            glob: r.glob,
            case_insensitive: r.case_insensitive,
            limit: r.limit,
        }
    }
}

impl From<SearchOutput> for pb::SearchFilesResponse {
    fn from(o: SearchOutput) -> Self {
        pb::SearchFilesResponse {
            matches: o
                .matches
                .into_iter()
                .map(|m| pb::SearchMatch {
                    path: m.path,
                    line: m.line,
                    text: m.text,
                })
                .collect(),
            truncated: o.truncated,
            files_searched: o.files_searched,
        }
    }
}
