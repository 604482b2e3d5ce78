//! Conversions of the file tools' requests and results (read, create,
//! edit, list, find, search, apply patch) between the wire and the domain.

use crate::pb;
use crate::workspace::patch::Action as PatchAction;
use crate::workspace::walk::{DirEntry, Kind};
use crate::workspace::{
    CreateOutput, EditOutput, EditSpec, FindOutput, ListOutput, PatchedFile, ReadOutput,
    SearchOutput, SearchQuery,
};

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
            rejected: None,
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
            rejected: None,
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

impl From<Vec<PatchedFile>> for pb::ApplyPatchResponse {
    fn from(files: Vec<PatchedFile>) -> Self {
        let lines: Vec<String> = files
            .iter()
            .map(|f| {
                let what = match f.action {
                    PatchAction::Modify => "changed",
                    PatchAction::Create => "created",
                    PatchAction::Delete => "deleted",
                    PatchAction::Rename => "renamed",
                };
                match &f.old_path {
                    Some(old) => format!("{what} {old} -> {} ({:+} lines)", f.path, f.line_delta),
                    None => format!("{what} {} ({:+} lines)", f.path, f.line_delta),
                }
            })
            .collect();
        let message = format!(
            "applied the patch to {} files: {}",
            files.len(),
            lines.join("; ")
        );
        pb::ApplyPatchResponse {
            files: files
                .into_iter()
                .map(|f| pb::PatchedFile {
                    path: f.path,
                    action: match f.action {
                        PatchAction::Modify => pb::PatchAction::Modified,
                        PatchAction::Create => pb::PatchAction::Created,
                        PatchAction::Delete => pb::PatchAction::Deleted,
                        PatchAction::Rename => pb::PatchAction::Renamed,
                    }
                    .into(),
                    old_path: f.old_path.unwrap_or_default(),
                    sha256_before: f.sha256_before.unwrap_or_default(),
                    sha256_after: f.sha256_after.unwrap_or_default(),
                    hunks: f.hunks,
                    line_delta: f.line_delta,
                })
                .collect(),
            message,
            rejected: None,
        }
    }
}
